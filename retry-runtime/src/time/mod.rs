//! Time: the duration units and defaults shared with the macro, virtual
//! time's core, the clocks a call reads, and the timer its async loops
//! sleep on.

pub mod clock;
pub mod timer;
pub(crate) mod units;
pub(crate) mod virtual_time;
