//! `docker-compose up` from the local images: every service healthy, a goal
//! worked by two runner containers, `down -v` leaves nothing behind.

use std::path::Path;
use std::process::Command;
use std::time::Duration;
use xo_tests::launcher::Xo;

use xo_bus::{Bus, NatsBus, typed};
use xo_proto::Subjects;
use xo_proto::queue::*;
use xo_tests::compose::{Project, password, run};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn compose_up_runs_a_goal_and_down_leaves_nothing() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    run(Command::new(root.join("deploy/docker/build"))
        .arg("--binary")
        .arg(xo_tests::launcher::bin())
        .current_dir(&root));
    let project = format!("xoc{}", std::process::id());
    let port = xo_tests::free_port().to_string();
    let console_port = xo_tests::free_port().to_string();
    let down = Project::new(
        root.clone(),
        project.clone(),
        vec![
            ("XO_NATS_PORT".into(), port.clone()),
            ("XO_CONSOLE_PORT".into(), console_port.clone()),
        ],
    );
    run(down.compose().args(["up", "-d", "--scale", "runner=2"]));
    let healthy = xo_tests::within(xo_tests::CONTAINER_GUARD, async || {
        let ps = run(down.compose().args(["ps"]));
        (ps.matches("(healthy)").count() >= 5 && ps.matches(" Up").count() >= 7).then_some(())
    })
    .await;
    assert!(healthy.is_some(), "{}", run(down.compose().args(["ps"])));
    // Locked down: NATS is published on the host's loopback only, and
    // refuses a client without a password.
    let published = run(down.compose().args(["port", "nats", "4222"]));
    assert!(published.trim().starts_with("127.0.0.1:"), "{published}");
    let refused = NatsBus::connect(&format!("nats://127.0.0.1:{port}"), Default::default()).await;
    assert!(
        refused
            .as_ref()
            .is_err_and(|e| e.to_string().to_lowercase().contains("authorization")),
        "{:?}",
        refused.map(|_| ())
    );
    let url = format!("nats://operator:{}@127.0.0.1:{port}", password("OPERATOR"));
    let bus = Bus::Nats(NatsBus::connect(&url, Default::default()).await.unwrap());
    let s = Subjects::default();
    let t = Duration::from_secs(10);
    typed::call(&bus, &s, &Init::default(), t).await.unwrap();
    typed::call(
        &bus,
        &s,
        &SetGoal {
            by: Default::default(),
            budget_usd: 0.0,
            description: "compose".into(),
            project_id: None,
            completed: true,
        },
        t,
    )
    .await
    .unwrap();
    let tasks: Vec<Task> = (1..=4)
        .map(|i| {
            let mut task = Task::new(
                format!("c{i}"),
                "write",
                format!("```xo-script\nturn_ms = 0\n[[run]]\nsteps = [{{ write = \"c{i}.txt\", content = \"c\" }}, {{ reply = '{{\"status\": \"ok\", \"message\": \"done\"}}' }}]\n```"),
                "coder",
            );
            task.acceptance_criteria = vec![format!("file exists: c{i}.txt")];
            task
        })
        .collect();
    typed::call(&bus, &s, &Enqueue::new(tasks), t)
        .await
        .unwrap();
    typed::call(&bus, &s, &Start::default(), t).await.unwrap();
    let client = xo_tests::ctl::client(&bus, t);
    let done = xo_tests::ctl::goal_completed(&client, xo_tests::CONTAINER_GUARD).await;
    let st = done.expect("the goal completes");
    if st.counts.get("completed") != Some(&4) {
        let tasks = typed::call(&bus, &s, &ListTasks::default(), t)
            .await
            .unwrap_or_default();
        let why: Vec<String> = tasks
            .iter()
            .map(|r| {
                format!(
                    "{} {}: {}",
                    r.task.task_id,
                    r.state.as_str(),
                    r.reason.as_deref().unwrap_or("")
                )
            })
            .collect();
        panic!(
            "4 tasks completed, not {:?}:\n{}",
            st.counts,
            why.join("\n")
        );
    }
    // Two runners shared the work through the shared volume.
    let units = run(Xo::new()
        .command(&[])
        .args(["--nats", &url, "units", "--json"]));
    assert!(
        units.matches("\"role\": \"coder\"").count() >= 2
            || units.matches("\"role\":\"coder\"").count() >= 2,
        "{units}"
    );
    // The console container: published on the host's loopback, and since it
    // listens on all addresses in its container, even reads need the token.
    let api = format!("http://127.0.0.1:{console_port}/api/v1/queue");
    let http = reqwest::Client::new();
    let r = http.get(&api).send().await.unwrap();
    assert_eq!(r.status(), reqwest::StatusCode::UNAUTHORIZED);
    let token =
        run(down
            .compose()
            .args(["exec", "-T", "console", "cat", "/data/state/console.token"]));
    let r = http
        .get(&api)
        .bearer_auth(token.trim())
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), reqwest::StatusCode::OK);
    let v: serde_json::Value = r.json().await.unwrap();
    assert_eq!(v["status"], "COMPLETED", "{v}");
    drop(bus);
    drop(down);
    let label = format!("label=com.docker.compose.project={project}");
    assert!(
        run(Command::new("docker").args(["ps", "-aq", "--filter", &label]))
            .trim()
            .is_empty()
    );
    assert!(
        !run(Command::new("docker").args(["network", "ls", "--format", "{{.Name}}"]))
            .contains(&project)
    );
    assert!(
        !run(Command::new("docker").args(["volume", "ls", "--format", "{{.Name}}"]))
            .contains(&project)
    );
}
