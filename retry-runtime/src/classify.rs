//! Which failures a retry can fix.
//!
//! Retrying a validation error produces the same error again, forever;
//! retrying a timeout of a non-idempotent call may charge a card twice. The
//! classifier is where those are told apart, once, next to the error type.

use std::io;
use std::time::Duration;

/// What to do about one outcome of an attempt.
///
/// ```
/// use retry_runtime::Verdict;
///
/// assert_eq!(Verdict::from(true), Verdict::Retry);
/// assert_eq!(Verdict::from(false), Verdict::Stop);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Verdict {
    /// Transient: another attempt may well succeed.
    Retry,
    /// The server said when to come back (`Retry-After`). The wait is
    /// honoured, spread upward by up to 20%, never shortened.
    RetryAfter(Duration),
    /// Ambiguous: the work may have happened (a timeout). Retried only when
    /// the operation is declared idempotent.
    RetryIfIdempotent,
    /// Retrying cannot help (a 400, a validation error): return at once.
    Stop,
}

impl Verdict {
    /// Whether a retry is wanted at all, assuming the operation is
    /// idempotent.
    ///
    /// ```
    /// use retry_runtime::Verdict;
    /// assert!(Verdict::RetryIfIdempotent.is_retryable());
    /// assert!(!Verdict::Stop.is_retryable());
    /// ```
    pub const fn is_retryable(self) -> bool {
        !matches!(self, Self::Stop)
    }
}

impl From<bool> for Verdict {
    /// `true` → [`Verdict::Retry`], `false` → [`Verdict::Stop`].
    fn from(retry: bool) -> Self {
        if retry { Self::Retry } else { Self::Stop }
    }
}

/// Errors that know whether a retry can fix them.
///
/// Implement it next to your error type, or pass `when` to the retry loop.
///
/// ```
/// use retry_runtime::{Classify, Verdict};
///
/// enum ApiError { Overloaded, BadRequest }
///
/// impl Classify for ApiError {
///     fn classify(&self) -> Verdict {
///         match self {
///             ApiError::Overloaded => Verdict::Retry,
///             ApiError::BadRequest => Verdict::Stop,
///         }
///     }
/// }
/// assert_eq!(ApiError::BadRequest.classify(), Verdict::Stop);
/// ```
#[diagnostic::on_unimplemented(
    message = "`{Self}` does not say which of its errors are worth retrying",
    label = "this error type does not implement `Classify`",
    note = "say which errors to retry at the call: `when = |e| ...` in `#[retry]`, \
            `.when(..)` on `Retry`; or, if `{Self}` is a type of your own crate, \
            implement `backstop::Classify` for it (retry only what a retry can fix)"
)]
pub trait Classify {
    /// The verdict for this error.
    fn classify(&self) -> Verdict;
}

impl Classify for io::Error {
    /// By [`io::ErrorKind`]: a refused, reset, aborted or unconnected
    /// connection, a broken pipe, an interrupted or would-block call are
    /// transient ([`Verdict::Retry`]); a timeout is ambiguous
    /// ([`Verdict::RetryIfIdempotent`]: the request may have been served);
    /// everything else (not found, permission denied, invalid input…)
    /// [`Verdict::Stop`]s.
    ///
    /// ```
    /// use std::io::{Error, ErrorKind};
    /// use retry_runtime::{Classify, Verdict};
    ///
    /// assert_eq!(Error::from(ErrorKind::ConnectionReset).classify(), Verdict::Retry);
    /// assert_eq!(Error::from(ErrorKind::TimedOut).classify(), Verdict::RetryIfIdempotent);
    /// assert_eq!(Error::from(ErrorKind::NotFound).classify(), Verdict::Stop);
    /// ```
    fn classify(&self) -> Verdict {
        use io::ErrorKind as K;
        match self.kind() {
            K::ConnectionRefused
            | K::ConnectionReset
            | K::ConnectionAborted
            | K::NotConnected
            | K::BrokenPipe
            | K::Interrupted
            | K::WouldBlock => Verdict::Retry,
            K::TimedOut => Verdict::RetryIfIdempotent,
            _ => Verdict::Stop,
        }
    }
}

impl<T: Classify + ?Sized> Classify for &T {
    fn classify(&self) -> Verdict {
        (**self).classify()
    }
}

impl<T: Classify + ?Sized> Classify for Box<T> {
    fn classify(&self) -> Verdict {
        (**self).classify()
    }
}

/// Decides the verdict for a value of type `X`: an error, or an `Ok` value
/// under `when_ok`.
///
/// The retry loops take one of these for errors and one for `Ok` values; the
/// ready-made ones are [`ByClassify`], [`NeverRetry`] and [`When`].
pub trait Classifier<X: ?Sized> {
    /// The verdict for `x`.
    fn verdict(&self, x: &X) -> Verdict;
}

/// Classifies errors by their [`Classify`] impl (the default for errors).
///
/// ```
/// use retry_runtime::{ByClassify, Classifier, Verdict};
/// let e = std::io::Error::from(std::io::ErrorKind::BrokenPipe);
/// assert_eq!(ByClassify.verdict(&e), Verdict::Retry);
/// ```
#[derive(Clone, Copy, Debug, Default)]
pub struct ByClassify;

impl<E: Classify + ?Sized> Classifier<E> for ByClassify {
    fn verdict(&self, e: &E) -> Verdict {
        e.classify()
    }
}

/// Never retries (the default for `Ok` values).
///
/// ```
/// use retry_runtime::{Classifier, NeverRetry, Verdict};
/// assert_eq!(NeverRetry.verdict(&42), Verdict::Stop);
/// ```
#[derive(Clone, Copy, Debug, Default)]
pub struct NeverRetry;

impl<X: ?Sized> Classifier<X> for NeverRetry {
    fn verdict(&self, _: &X) -> Verdict {
        Verdict::Stop
    }
}

/// A closure or function `Fn(&X) -> impl Into<Verdict>` used as a
/// classifier: it may answer `bool` or [`Verdict`].
///
/// ```
/// use retry_runtime::{Classifier, Verdict, When};
///
/// let status_503 = When(|status: &u16| *status == 503);
/// assert_eq!(status_503.verdict(&503), Verdict::Retry);
/// assert_eq!(status_503.verdict(&404), Verdict::Stop);
/// ```
#[derive(Clone, Copy, Debug, Default)]
pub struct When<F>(pub F);

impl<X: ?Sized, F, V> Classifier<X> for When<F>
where
    F: Fn(&X) -> V,
    V: Into<Verdict>,
{
    fn verdict(&self, x: &X) -> Verdict {
        (self.0)(x).into()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use io::ErrorKind as K;

    #[test]
    fn io_errors_are_classified_by_kind() {
        let transient = [
            K::ConnectionRefused,
            K::ConnectionReset,
            K::ConnectionAborted,
            K::NotConnected,
            K::BrokenPipe,
            K::Interrupted,
            K::WouldBlock,
        ];
        for kind in transient {
            assert_eq!(io::Error::from(kind).classify(), Verdict::Retry, "{kind:?}");
        }
        assert_eq!(
            io::Error::from(K::TimedOut).classify(),
            Verdict::RetryIfIdempotent
        );
        let permanent = [
            K::NotFound,
            K::PermissionDenied,
            K::InvalidInput,
            K::InvalidData,
            K::AlreadyExists,
            K::UnexpectedEof,
            K::Unsupported,
            K::Other,
        ];
        for kind in permanent {
            assert_eq!(io::Error::from(kind).classify(), Verdict::Stop, "{kind:?}");
        }
    }

    #[test]
    fn references_and_boxes_classify_like_their_target() {
        let e = io::Error::from(K::BrokenPipe);
        assert_eq!(Classify::classify(&&e), Verdict::Retry);
        assert_eq!(Box::new(e).classify(), Verdict::Retry);
    }
}
