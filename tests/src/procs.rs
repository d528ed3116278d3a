//! Processes of a test (`xo serve …` per service): each one's stderr goes to
//! `<root>/<name>.log`; killed (SIGKILL) on demand and on drop; the tails of
//! their logs for a failure message.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};

#[derive(Debug)]
pub struct Procs {
    pub root: PathBuf,
    children: BTreeMap<String, Child>,
}

impl Procs {
    pub fn new(root: PathBuf) -> Self {
        Self {
            root,
            children: BTreeMap::new(),
        }
    }

    /// Starts `cmd` as `name` (stdout dropped, stderr appended to its log).
    pub fn start(&mut self, name: &str, mut cmd: Command) {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.root.join(format!("{name}.log")))
            .expect("process log");
        let child = cmd
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .unwrap_or_else(|e| panic!("starting {name}: {e}"));
        self.children.insert(name.to_string(), child);
    }

    /// SIGKILL, and wait for it.
    pub fn kill(&mut self, name: &str) {
        if let Some(mut c) = self.children.remove(name) {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// SIGINT (a graceful stop: the process flushes what it holds, its
    /// traces among them), and wait for it to exit; SIGKILL after 30 s.
    pub fn stop(&mut self, name: &str) {
        let Some(mut c) = self.children.remove(name) else {
            return;
        };
        let _ = crate::signal(c.id(), "INT");
        for _ in 0..600 {
            if matches!(c.try_wait(), Ok(Some(_))) {
                return;
            }
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
        let _ = c.kill();
        let _ = c.wait();
    }

    /// The last `lines` lines of every live process's log.
    pub fn logs(&self, lines: usize) -> String {
        let mut s = String::new();
        for name in self.children.keys() {
            let text =
                std::fs::read_to_string(self.root.join(format!("{name}.log"))).unwrap_or_default();
            let tail: Vec<&str> = text.lines().rev().take(lines).collect();
            s.push_str(&format!(
                "--- {name}\n{}\n",
                tail.into_iter().rev().collect::<Vec<_>>().join("\n")
            ));
        }
        s
    }
}

impl Drop for Procs {
    fn drop(&mut self) {
        for (_, mut c) in std::mem::take(&mut self.children) {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}
