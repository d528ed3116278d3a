//! The review service's control API (`xo.ctl.review.runs`): the run log,
//! answered by an actor of its own so a review in progress (minutes on a
//! slow model) never holds up a reader.

use ractor::{Actor, ActorProcessingErr, ActorRef};
use xo_bus::api::ActorPorts;
use xo_proto::knowledge::ReviewApi;
use xo_runtime::XoConfig;

use crate::runlog::{read_run_log, run_log_path};

/// Reads the run log for each request.
#[derive(Debug, Clone)]
pub struct RunsActor {
    pub cfg: XoConfig,
}

/// The actor's one message: a request of its API.
pub struct RunsMsg(pub ReviewApi<ActorPorts>);

impl From<ReviewApi<ActorPorts>> for RunsMsg {
    fn from(a: ReviewApi<ActorPorts>) -> Self {
        RunsMsg(a)
    }
}

impl Actor for RunsActor {
    type Msg = RunsMsg;
    type State = ();
    type Arguments = ();

    async fn pre_start(&self, _: ActorRef<RunsMsg>, _: ()) -> Result<(), ActorProcessingErr> {
        Ok(())
    }

    async fn handle(
        &self,
        _: ActorRef<RunsMsg>,
        msg: RunsMsg,
        _: &mut (),
    ) -> Result<(), ActorProcessingErr> {
        match msg.0 {
            ReviewApi::Runs(q, reply) => {
                let mut runs = read_run_log(&run_log_path(&self.cfg)).await;
                if let Some(n) = q.last {
                    runs = runs.split_off(runs.len().saturating_sub(n));
                }
                let _ = reply.send(Ok(runs));
            }
        }
        Ok(())
    }
}
