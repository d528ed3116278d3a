//! What a watch does with a session's new lines: SALUTE reports on the
//! bus, and steering handed back to the session's hook.

use super::*;

/// Where a session's reports go.
pub(super) struct Out<'a> {
    pub(super) bus: &'a Bus,
    pub(super) subjects: &'a Subjects,
    pub(super) cfg: &'a XoConfig,
    pub(super) role: &'a str,
    /// History read before the watch started: the state is kept, nothing
    /// is reported.
    pub(super) quiet: bool,
}

impl Out<'_> {
    /// Feeds the lines to the session's sensor and reports a turn each;
    /// once the agent rests (its session ended, or it waits for its user),
    /// one report more says so.
    pub(super) async fn publish(&self, s: &mut Session, lines: Vec<String>) {
        // The session wrote after its hooks said it waits: it moved (a cap
        // stays until the watch restarts with a higher one).
        if !lines.is_empty()
            && !s.needs_fresh
            && s.needs
                .as_ref()
                .is_some_and(|n| n.reason != xo_proto::NeedsReason::Budget)
        {
            info!(
                unit = s.unit().unwrap_or(&s.name),
                "session moved: it no longer waits for a person"
            );
            s.needs = None;
        }
        for line in lines {
            // The project directory, from the first line that names one (a
            // format that never does is not parsed a second time per line).
            if s.cwd.is_none()
                && line.contains("\"cwd\"")
                && let Ok(v) = serde_json::from_str::<serde_json::Value>(&line)
            {
                let cwd = v
                    .get("cwd")
                    .or_else(|| v.get("payload").and_then(|p| p.get("cwd")))
                    .and_then(|c| c.as_str());
                s.cwd = cwd.map(PathBuf::from);
            }
            match s.sensor.line(&line) {
                Ok(turns) => {
                    for t in turns {
                        let (unit, state) = s.unit.get_or_insert_with(|| {
                            // Named as `xo import` names it: the session id
                            // the stream gives, else the file.
                            let unit = unit_for(s.sensor.session(), &s.name);
                            info!(unit = %unit, "session named");
                            let mut state = SaluteState::new(
                                &unit,
                                self.role,
                                None,
                                self.cfg.runner.context_limit,
                            );
                            state.start_task(Some(s.sensor.session().unwrap_or(&unit).to_string()));
                            (unit, state)
                        });
                        let mut r = state.turn(t);
                        r.status.needs = s.needs.clone();
                        r.status.unreadable = s.sensor.unread();
                        s.rested = false;
                        let unit = unit.clone();
                        self.send(&unit, &r).await;
                    }
                }
                Err(e) => {
                    warn!(unit = s.unit().unwrap_or(&s.name), line = e.line, reason = %e.reason, "session line not used")
                }
            }
        }
        // Its provider refused it until a usage limit resets: told once,
        // as a rest with the time (not stalled, not stale, not steered).
        let limited = s.sensor.limited_until();
        if limited.is_some() && limited != s.limit_told {
            s.limit_told = limited;
            if let Some((unit, state)) = &mut s.unit
                && let Some(mut r) = state.rest()
            {
                r.status.waiting_until = limited;
                r.status.needs = s.needs.clone();
                r.status.unreadable = s.sensor.unread();
                s.rested = true;
                if !self.quiet {
                    info!(unit = %unit, until = ?limited, "session waits for its usage limit to reset");
                }
                let unit = unit.clone();
                self.send(&unit, &r).await;
            }
        } else if limited.is_none() {
            s.limit_told = None;
        }
        if s.sensor.resting() && !s.rested {
            s.rested = true;
            if let Some((unit, state)) = &mut s.unit
                && let Some(mut r) = state.rest()
            {
                r.status.needs = s.needs.clone();
                r.status.unreadable = s.sensor.unread();
                if !self.quiet {
                    info!(unit = %unit, turn = r.time.turn, "session ended (or waits for its user): reported ended");
                }
                let unit = unit.clone();
                self.send(&unit, &r).await;
            }
        }
    }

    /// The session waits for a person (its hook said so, or its cap is
    /// reached): reported at once, and on every report until it moves.
    pub(super) async fn wait(&self, s: &mut Session, needs: UnitNeeds) {
        if s.needs.as_ref() == Some(&needs) {
            return;
        }
        info!(unit = s.unit().unwrap_or(&s.name), reason = %needs.reason, detail = %needs.detail, "session waits for a person");
        s.needs = Some(needs.clone());
        s.needs_fresh = true;
        if let Some((unit, state)) = &mut s.unit
            && let Some(mut r) = state.waiting(needs)
        {
            r.status.unreadable = s.sensor.unread();
            s.rested = true;
            let unit = unit.clone();
            self.send(&unit, &r).await;
        }
    }

    async fn send(&self, unit: &str, r: &SaluteReport) {
        if self.quiet {
            return;
        }
        if let Err(e) = typed::publish(
            self.bus,
            &self.subjects.salute(unit),
            r,
            self.cfg.wire.format,
        )
        .await
        {
            warn!(unit = %unit, error = %e, "report not published");
        }
    }
}

/// Steering for a watched session: appended for its hook, in its project,
/// addressed to it — unless nothing would read it: a session idle since
/// before the watch started, or one that has ended.
pub(super) async fn hand_over(sessions: &BTreeMap<PathBuf, Session>, st: &Steering) {
    let by_unit: HashMap<&str, &Session> = sessions
        .values()
        .filter_map(|s| Some((s.unit()?, s)))
        .collect();
    let Some(s) = by_unit.get(st.unit.as_str()) else {
        return;
    };
    if !s.live {
        info!(unit = %st.unit, kind = st.kind.as_str(), "steering not delivered: the session has not written since the watch started");
        return;
    }
    if s.sensor.resting() {
        info!(unit = %st.unit, kind = st.kind.as_str(), "steering not delivered: the session has ended (or waits for its user)");
        return;
    }
    let Some(cwd) = &s.cwd else {
        warn!(unit = %st.unit, "steering for a session with no project directory known (OpenHands takes none from outside): not delivered");
        return;
    };
    // Addressed to the session the agent's hook is called with (a
    // subagent's calls run in its parent's session); another session of
    // the same project leaves it pending. Logged there if it cannot be
    // written.
    let to = s.sensor.parent().or(s.sensor.session()).unwrap_or(&st.unit);
    xo_pipeline::driver::command::deliver_to(cwd, Some(to), std::slice::from_ref(&st.message))
        .await;
    info!(unit = %st.unit, kind = st.kind.as_str(), dir = %cwd.display(), "steering handed to the session's hook");
}
