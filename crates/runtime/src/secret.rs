//! Secrets made and compared: [`xo_proto::secret`], where the bus (below
//! this library) finds it too.

pub use xo_proto::secret::*;
