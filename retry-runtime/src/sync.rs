//! The one place the lock-free limiters get their atomics from: std's, or
//! under `cfg(loom)` loom's, whose model checker explores every
//! interleaving of them (the models in `tests/loom/`). Loom's atomics
//! cannot be made in const evaluation: the limiters' constructors are
//! `const fn`s but under loom (`const_unless_loom!`), and their arrays of
//! atomics are built by `zeroed_atomics!`.

#[cfg(loom)]
pub(crate) use loom::sync::atomic::AtomicU64;
#[cfg(not(loom))]
pub(crate) use std::sync::atomic::AtomicU64;

#[cfg(loom)]
pub(crate) use loom::sync::Mutex;
#[cfg(not(loom))]
pub(crate) use std::sync::Mutex;

/// A `const fn`, but a plain `fn` under `cfg(loom)`.
macro_rules! const_unless_loom {
    ($(#[$attr:meta])* $vis:vis fn $($rest:tt)*) => {
        #[cfg(not(loom))]
        $(#[$attr])* $vis const fn $($rest)*
        #[cfg(loom)]
        $(#[$attr])* $vis fn $($rest)*
    };
}

/// An array of `$n` zeroed [`AtomicU64`]s: in const evaluation, or under
/// loom at run time.
#[cfg(not(loom))]
macro_rules! zeroed_atomics {
    ($n:expr) => {
        [const { $crate::sync::AtomicU64::new(0) }; $n]
    };
}

#[cfg(loom)]
macro_rules! zeroed_atomics {
    ($n:expr) => {
        std::array::from_fn(|_| $crate::sync::AtomicU64::new(0))
    };
}
