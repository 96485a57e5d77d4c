//! Observing retries: what hooks (`on_retry`, `on_give_up`) are told.
//!
//! A retry that nobody can see is a retry storm nobody can diagnose: every
//! retry and every give-up can be reported, with the attempt, the delay,
//! the verdict, the reason and the outcome itself.

use std::fmt;
#[cfg(any(feature = "tracing", feature = "metrics"))]
use std::num::NonZeroU64;
use std::sync::OnceLock;
use std::time::Duration;

use crate::classify::Verdict;
#[cfg(any(feature = "tracing", feature = "metrics"))]
use crate::limit::names;
pub use crate::state::vocabulary::OwnText;
use crate::state::vocabulary::{Decision, GiveUp};

/// The `function` of a call nobody named.
pub(crate) const ANONYMOUS: &str = "anonymous";

/// The function a call is made by, for `tracing` and `metrics`: `#[retry]`
/// gives each function a `static` one, so that its metric labels are built
/// at compile time and a call allocates nothing to report itself.
///
/// A free function is named by its path (`my_service::users::fetch_user`).
/// A method is named by the type it is called on: its `static` holds the
/// method's name, and [`of_type`](Self::of_type) gives the `Function` of
/// each type (`my_service::Client::get`), made once, on its first call.
///
/// ```
/// use backstop_runtime::macro_support::Function;
/// static FETCH_USER: Function = Function::new("users::fetch_user");
/// assert_eq!(FETCH_USER.name(), "users::fetch_user");
///
/// mod users { pub struct Client<T>(pub T); }
/// static GET: Function = Function::new("get");
/// let get = GET.of_type(std::any::type_name::<&users::Client<u32>>());
/// assert!(get.name().ends_with("::users::Client::get"), "{}", get.name());
/// assert!(std::ptr::eq(get, GET.of_type(std::any::type_name::<&users::Client<u32>>())));
/// ```
#[derive(Debug)]
pub struct Function {
    name: &'static str,
    #[cfg(feature = "metrics")]
    labels: [metrics::Label; 1],
    /// `labels` and each `outcome` of `backstop_calls_total`, by
    /// [`Ended`].
    #[cfg(feature = "metrics")]
    ended: [[metrics::Label; 2]; 3],
    /// For a method: the `Function` of each type it was called on.
    by_type: OnceLock<&'static ByType>,
}

/// One type's `Function` for a method, and the next type's.
#[derive(Debug)]
struct ByType {
    /// `std::any::type_name` of the type.
    self_type: &'static str,
    function: Function,
    next: OnceLock<&'static ByType>,
}

impl Function {
    /// The function named `name`.
    pub const fn new(name: &'static str) -> Self {
        Self {
            name,
            #[cfg(feature = "metrics")]
            labels: [metrics::Label::from_static_parts("function", name)],
            #[cfg(feature = "metrics")]
            ended: [
                Ended::Ok.labels(name),
                Ended::Error.labels(name),
                Ended::Dropped.labels(name),
            ],
            by_type: OnceLock::new(),
        }
    }

    /// Its name.
    pub const fn name(&self) -> &'static str {
        self.name
    }

    /// This method as called on the type named `self_type` (what
    /// `std::any::type_name::<Self>()` answers): named
    /// `path::to::Type::method`, the type's generic arguments left out, so
    /// that every instance of a generic type shares one label. Each type's
    /// name is built once, on its first call, and kept for the life of the
    /// process (a few dozen bytes per type and method).
    pub fn of_type(&'static self, self_type: &'static str) -> &'static Self {
        let mut slot = &self.by_type;
        loop {
            let node = slot.get_or_init(|| {
                let name = format!("{}::{}", type_path(self_type), self.name);
                Box::leak(Box::new(ByType {
                    self_type,
                    function: Self::new(Box::leak(name.into_boxed_str())),
                    next: OnceLock::new(),
                }))
            });
            if node.self_type == self_type {
                return &node.function;
            }
            slot = &node.next;
        }
    }
}

/// A type's path without its generic arguments or reference: `&mut
/// a::B<c::D>` is `a::B`.
fn type_path(type_name: &str) -> &str {
    let name = type_name.split('<').next().unwrap_or(type_name);
    let name = name.trim_start_matches(['&', '*', '(', '[']);
    let name = name.strip_prefix("mut ").unwrap_or(name);
    let name = name.strip_prefix("const ").unwrap_or(name);
    let name = name.strip_prefix("dyn ").unwrap_or(name);
    name.trim_end_matches([')', ']', ';', ' '])
}

static ANONYMOUS_FUNCTION: Function = Function::new(ANONYMOUS);

/// How many names given at run time (`Retry::name`) keep a `Function` of
/// their own, with static labels.
#[cfg(feature = "metrics")]
const NAMES_KEPT: usize = 64;

/// One name given at run time, and the next.
#[cfg(feature = "metrics")]
struct Named {
    function: Function,
    next: OnceLock<&'static Named>,
}

/// The `Function` of a name given at run time, made on its first call
/// and kept for the life of the process, for the first
/// [`NAMES_KEPT`] names: their calls count under static labels and
/// allocate nothing, as a `#[retry]` function's do. `None` past them (a
/// process that makes names as it goes): a call then builds its labels.
#[cfg(feature = "metrics")]
fn named(name: &'static str) -> Option<&'static Function> {
    static FIRST: OnceLock<&'static Named> = OnceLock::new();
    let mut slot = &FIRST;
    for _ in 0..NAMES_KEPT {
        let node = slot.get_or_init(|| {
            Box::leak(Box::new(Named {
                function: Function::new(name),
                next: OnceLock::new(),
            }))
        });
        // (The same `&str` most often, or the same text.)
        if std::ptr::eq(node.function.name, name) || node.function.name == name {
            return Some(&node.function);
        }
        slot = &node.next;
    }
    None
}

/// How a function's error is shown in its call's `tracing` events (the
/// `error` field), if it can be: asked as
/// `(&&DisplayOf::of(outcome)).display_fn()` with the three traits in
/// scope: [`ViaOwnText`] answers [`ByOwnText`] for an error with words of
/// its own for the events ([`OwnText`]: reqwest's, without their URL; a
/// method on `&DisplayOf<E>`, found first), [`ViaDisplay`] [`ByDisplay`]
/// for `E: Display` (on `&&DisplayOf<E>`, found at the first autoref),
/// [`ViaNoDisplay`] [`NoDisplay`] otherwise (on `DisplayOf<E>`, found
/// past a deref). The answer is a type: nothing is kept or asked at run
/// time.
///
/// ```
/// # extern crate backstop_runtime as backstop;
/// use backstop::macro_support::{
///     DisplayOf, ShowError, ViaDisplay as _, ViaNoDisplay as _, ViaOwnText as _,
/// };
/// struct Opaque;
/// fn shown<E, S: ShowError<E>>(_: S, error: &E) -> Option<String> {
///     S::show(error).map(|shown| shown.to_string())
/// }
/// let refused = std::io::Error::other("refused");
/// let show = (&&DisplayOf::of(Err::<&(), _>(&refused))).display_fn();
/// assert_eq!(shown(show, &refused).as_deref(), Some("refused"));
/// let show = (&&DisplayOf::of(Err::<&(), _>(&Opaque))).display_fn();
/// assert_eq!(shown(show, &Opaque), None);
/// ```
pub struct DisplayOf<E>(std::marker::PhantomData<fn() -> E>);

impl<E> DisplayOf<E> {
    /// The question, for the error type of `outcome`.
    pub const fn of<T>(outcome: Result<&T, &E>) -> Self {
        let _ = outcome;
        Self(std::marker::PhantomData)
    }
}

/// An error's text, as an event shows it.
#[derive(Clone, Copy)]
pub enum ErrorShown<'a> {
    /// By its `Display`, in its alternate form (`{:#}`: an `anyhow`
    /// error's whole chain of causes; most types write the same).
    Display(&'a dyn fmt::Display),
    /// In its own words ([`OwnText`]).
    Own(&'a dyn OwnText),
}

/// Written with every URL's query, fragment and user info left out (an
/// error's text, whatever its type, may hold a request's URL: reqwest's
/// does, and so does any error that says it, wrapped in `anyhow` or a
/// `thiserror` variant): a secret's usual places stay out of the logs.
impl fmt::Display for ErrorShown<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        /// Writes `text()` through a buffer, then its URLs redacted.
        struct Text<'a>(&'a ErrorShown<'a>);
        impl fmt::Display for Text<'_> {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                match self.0 {
                    ErrorShown::Display(error) => write!(f, "{error:#}"),
                    ErrorShown::Own(error) => error.write_text(f),
                }
            }
        }
        // (Only when an event is written: a failure's, with a subscriber.)
        write_redacted(&Text(self).to_string(), f)
    }
}

/// `text` with each URL's user info (`user:password@`), query and fragment
/// left out: `http://u:p@host/a?token=x#f` is `http://host/a`. A URL is
/// found by its `://` and ends at whitespace or a closing bracket or quote
/// (`)`, `]`, `}`, `>`, `"`, `` ` ``), which a query seldom holds; its
/// query and user info are cut whatever they hold (commas, semicolons and
/// quotes included).
fn write_redacted(text: &str, f: &mut impl fmt::Write) -> fmt::Result {
    /// Where a URL written in prose ends.
    fn ends_url(c: char) -> bool {
        c.is_whitespace() || matches!(c, ')' | ']' | '}' | '>' | '"' | '`')
    }
    let mut rest = text;
    while let Some(at) = rest.find("://") {
        let start = at + 3;
        let end = rest[start..]
            .find(ends_url)
            .map_or(rest.len(), |n| start + n);
        let url = &rest[start..end];
        // The authority: up to the first `/`, `?` or `#`; its user info,
        // up to its last `@`.
        let authority_end = url.find(['/', '?', '#']).unwrap_or(url.len());
        let host_from = url[..authority_end].rfind('@').map_or(0, |n| n + 1);
        let kept_end = url.find(['?', '#']).unwrap_or(url.len());
        f.write_str(&rest[..start])?;
        f.write_str(&url[host_from..kept_end.max(host_from)])?;
        rest = &rest[end..];
    }
    f.write_str(rest)
}

/// How an error of type `E` is shown, if it is: see [`DisplayOf`].
pub trait ShowError<E>: Copy {
    /// Whether it is shown at all.
    const SHOWS: bool;
    /// `error`, as shown.
    fn show(error: &E) -> Option<ErrorShown<'_>>;
}

/// An error shown in its own words.
#[derive(Clone, Copy, Debug)]
pub struct ByOwnText;

impl<E: OwnText> ShowError<E> for ByOwnText {
    const SHOWS: bool = true;
    fn show(error: &E) -> Option<ErrorShown<'_>> {
        Some(ErrorShown::Own(error))
    }
}

/// An error shown by its `Display`.
#[derive(Clone, Copy, Debug)]
pub struct ByDisplay;

impl<E: fmt::Display> ShowError<E> for ByDisplay {
    const SHOWS: bool = true;
    fn show(error: &E) -> Option<ErrorShown<'_>> {
        Some(ErrorShown::Display(error))
    }
}

/// An error not shown: its type has no `Display`.
#[derive(Clone, Copy, Debug)]
pub struct NoDisplay;

impl<E> ShowError<E> for NoDisplay {
    const SHOWS: bool = false;
    fn show(_: &E) -> Option<ErrorShown<'_>> {
        None
    }
}

/// See [`DisplayOf`].
pub trait ViaOwnText {
    /// [`ByOwnText`].
    fn display_fn(&self) -> ByOwnText;
}

impl<E: OwnText> ViaOwnText for &DisplayOf<E> {
    fn display_fn(&self) -> ByOwnText {
        ByOwnText
    }
}

/// See [`DisplayOf`].
pub trait ViaDisplay {
    /// [`ByDisplay`].
    fn display_fn(&self) -> ByDisplay;
}

impl<E: fmt::Display> ViaDisplay for &&DisplayOf<E> {
    fn display_fn(&self) -> ByDisplay {
        ByDisplay
    }
}

/// See [`DisplayOf`].
pub trait ViaNoDisplay {
    /// [`NoDisplay`]: `E` cannot be shown.
    fn display_fn(&self) -> NoDisplay;
}

impl<E> ViaNoDisplay for DisplayOf<E> {
    fn display_fn(&self) -> NoDisplay {
        NoDisplay
    }
}

/// A success type whose status a call's `tracing` events show (`status`)
/// when a `when_ok` classifier judges it a failure: an HTTP response's
/// (reqwest's, `http`'s), or a gRPC response's `grpc-status` when it
/// carries one in its headers.
pub trait ShowsStatus {
    /// The status shown, if it has one.
    fn shown_status(&self) -> Option<u16>;
}

/// How a success judged a failure is shown, if it is: asked as
/// `(&&StatusOf::of(outcome)).status_fn()` with [`ViaStatus`] and
/// [`ViaNoStatus`] in scope, as [`DisplayOf`] asks of the error: [`ByStatus`]
/// for a type that [`ShowsStatus`], [`NoStatus`] otherwise.
///
/// ```
/// # extern crate backstop_runtime as backstop;
/// use backstop::macro_support::{ShowStatus, StatusOf, ViaNoStatus as _, ViaStatus as _};
/// fn shown<T, S: ShowStatus<T>>(_: S, ok: &T) -> Option<u16> {
///     S::status(ok)
/// }
/// # #[cfg(feature = "http")] {
/// let busy = http::StatusCode::SERVICE_UNAVAILABLE;
/// let show = (&&StatusOf::of(Ok::<_, &()>(&busy))).status_fn();
/// assert_eq!(shown(show, &busy), Some(503));
/// # }
/// let show = (&&StatusOf::of(Ok::<_, &()>(&"body"))).status_fn();
/// assert_eq!(shown(show, &"body"), None);
/// ```
pub struct StatusOf<T>(std::marker::PhantomData<fn() -> T>);

impl<T> StatusOf<T> {
    /// The question, for the success type of `outcome`.
    pub const fn of<E>(outcome: Result<&T, &E>) -> Self {
        let _ = outcome;
        Self(std::marker::PhantomData)
    }
}

/// How a success of type `T` is shown, if it is: see [`StatusOf`].
pub trait ShowStatus<T>: Copy {
    /// Whether it is shown at all.
    const SHOWS: bool;
    /// `ok`'s status, as shown.
    fn status(ok: &T) -> Option<u16>;
}

/// A success shown by its status.
#[derive(Clone, Copy, Debug)]
pub struct ByStatus;

impl<T: ShowsStatus> ShowStatus<T> for ByStatus {
    const SHOWS: bool = true;
    fn status(ok: &T) -> Option<u16> {
        ok.shown_status()
    }
}

/// A success not shown.
#[derive(Clone, Copy, Debug)]
pub struct NoStatus;

impl<T> ShowStatus<T> for NoStatus {
    const SHOWS: bool = false;
    fn status(_: &T) -> Option<u16> {
        None
    }
}

/// See [`StatusOf`].
pub trait ViaStatus {
    /// [`ByStatus`].
    fn status_fn(&self) -> ByStatus;
}

impl<T: ShowsStatus> ViaStatus for &StatusOf<T> {
    fn status_fn(&self) -> ByStatus {
        ByStatus
    }
}

/// See [`StatusOf`].
pub trait ViaNoStatus {
    /// [`NoStatus`]: a success of type `T` shows nothing.
    fn status_fn(&self) -> NoStatus;
}

impl<T> ViaNoStatus for StatusOf<T> {
    fn status_fn(&self) -> NoStatus {
        NoStatus
    }
}

/// How an outcome is shown in a call's events: its error as `W` shows it
/// ([`ShowError`]), a success judged a failure as `S` does
/// ([`ShowStatus`]). The macro gives the pair.
pub trait Show<T, E>: Copy {
    /// Whether anything is shown at all.
    const SHOWS: bool;
    /// `outcome`, as shown.
    fn shown<'a>(outcome: Result<&'a T, &'a E>) -> Shown<'a>;
}

impl<T, E, W: ShowError<E>, S: ShowStatus<T>> Show<T, E> for (W, S) {
    const SHOWS: bool = W::SHOWS || S::SHOWS;
    fn shown<'a>(outcome: Result<&'a T, &'a E>) -> Shown<'a> {
        match outcome {
            Err(error) => W::show(error).map_or(Shown::Nothing, Shown::Error),
            Ok(ok) => S::status(ok).map_or(Shown::Nothing, Shown::Status),
        }
    }
}

/// What an event tells of an attempt's outcome, besides its verdict: the
/// error's text where the loop knows it can be shown (a `#[retry]`
/// function's, by its `Display` or in its own words; the reqwest
/// middleware's, in its own words), or a response's status (the HTTP
/// layer's and the middleware's), or nothing.
#[derive(Clone, Copy, Default)]
pub enum Shown<'a> {
    /// Nothing to show: a success, or an error whose text the loop cannot
    /// read.
    #[default]
    Nothing,
    /// The error's text.
    Error(ErrorShown<'a>),
    /// A response's status: an HTTP status, or a gRPC response's
    /// `grpc-status` (as the tower layer's `Answer::status` reads it).
    Status(u16),
}

impl Shown<'_> {
    /// Whether it shows a status (an HTTP status, or a gRPC response's
    /// `grpc-status`: codes 0 to 16, below any HTTP status) that says the
    /// dependency failed, not the request: an HTTP 5xx but 501 and 505
    /// (the request asks what the server does not do), or a gRPC
    /// `UNKNOWN` (2), `DEADLINE_EXCEEDED` (4), `RESOURCE_EXHAUSTED` (8),
    /// `INTERNAL` (13), `UNAVAILABLE` (14) or `DATA_LOSS` (15). An answer
    /// about the request (a 404, a 412, `NOT_FOUND`, `ABORTED`…) is one a
    /// caller may act on.
    pub(crate) const fn server_failed(self) -> bool {
        match self {
            Self::Status(status) => {
                matches!(status, 2 | 4 | 8 | 13 | 14 | 15)
                    || (status >= 500 && status <= 599 && status != 501 && status != 505)
            }
            _ => false,
        }
    }
}

#[cfg(feature = "tracing")]
impl<'a> Shown<'a> {
    /// The `error` field of an event.
    fn error(self) -> Option<tracing::field::DisplayValue<ErrorShown<'a>>> {
        match self {
            Self::Error(error) => Some(tracing::field::display(error)),
            _ => None,
        }
    }

    /// The `status` field of an event.
    fn status(self) -> Option<u16> {
        match self {
            Self::Status(status) => Some(status),
            _ => None,
        }
    }
}

/// What one call reports of itself: the function, its key, its attempts,
/// the time it slept, its span. With neither feature it is a few words and
/// no code.
pub(crate) struct Observe {
    who: Who,
    /// The call's key, as the names' table keeps it (`names::word`), if
    /// it gave one: its `key` label (kept only for `tracing` and
    /// `metrics`: a call that reports nothing does not carry it).
    #[cfg(any(feature = "tracing", feature = "metrics"))]
    key: Option<NonZeroU64>,
    attempts: u32,
    /// Time slept between attempts (only `metrics` reports it).
    #[cfg(feature = "metrics")]
    slept: Duration,
    /// The end of the call has been reported.
    ended: bool,
    /// A retry was told (`retrying`, at INFO): its give-up is told at INFO
    /// too.
    #[cfg(feature = "tracing")]
    retried: bool,
    /// Made at its first use, when the call's function and key are known:
    /// the span is made with its fields, not filled in afterwards (a
    /// subscriber that prints spans as they are made sees them).
    #[cfg(feature = "tracing")]
    span: std::cell::OnceCell<tracing::Span>,
}

/// How a call ended, for `backstop_calls_total`'s `outcome`.
#[derive(Clone, Copy)]
enum Ended {
    /// It returned an outcome it accepted (a success, or an `Ok` that
    /// `when_ok` did not retry): `ok`.
    Ok,
    /// It returned a failure or a rejection: it gave up, its first
    /// failure was not retried, or it was turned away: `error`.
    Error,
    /// It ended before it was decided: its future was dropped, or an
    /// attempt panicked: `dropped`.
    // (Told by the drop of a call's observer, which only `metrics` has.)
    #[cfg_attr(not(feature = "metrics"), allow(dead_code))]
    Dropped,
}

#[cfg(feature = "metrics")]
impl Ended {
    /// The label's value.
    const fn as_str(self) -> &'static str {
        match self {
            Ended::Ok => "ok",
            Ended::Error => "error",
            Ended::Dropped => "dropped",
        }
    }

    /// The labels of a call of `function` that ended so.
    const fn labels(self, function: &'static str) -> [metrics::Label; 2] {
        [
            metrics::Label::from_static_parts("function", function),
            metrics::Label::from_static_parts("outcome", self.as_str()),
        ]
    }
}

/// Whom a call reports as.
#[derive(Clone, Copy)]
enum Who {
    /// A function with its static labels (`#[retry]`'s, or nobody's).
    Function(&'static Function),
    /// A name given at run time (`Retry::name`), without static labels.
    Named(&'static str),
}

impl Observe {
    pub(crate) fn new() -> Self {
        Self {
            who: Who::Function(&ANONYMOUS_FUNCTION),
            #[cfg(any(feature = "tracing", feature = "metrics"))]
            key: None,
            attempts: 0,
            #[cfg(feature = "metrics")]
            slept: Duration::ZERO,
            ended: false,
            #[cfg(feature = "tracing")]
            retried: false,
            #[cfg(feature = "tracing")]
            span: std::cell::OnceCell::new(),
        }
    }

    pub(crate) fn name(&self) -> &'static str {
        match self.who {
            Who::Function(function) => function.name,
            Who::Named(name) => name,
        }
    }

    pub(crate) fn set_function(&mut self, function: &'static Function) {
        self.who = Who::Function(function);
        #[cfg(feature = "tracing")]
        if let Some(span) = self.span.get() {
            span.record("function", function.name);
        }
    }

    pub(crate) fn set_name(&mut self, name: &'static str) {
        // Nobody's name (a `Retry`, a layer or a middleware not named)
        // keeps nobody's static labels: counted, it allocates nothing.
        #[cfg(feature = "metrics")]
        if name == ANONYMOUS {
            self.set_function(&ANONYMOUS_FUNCTION);
            return;
        }
        self.who = Who::Named(name);
        #[cfg(feature = "tracing")]
        if let Some(span) = self.span.get() {
            span.record("function", name);
        }
    }

    /// The call's key (its hash), if it gave one: its `key` label, the
    /// name `limit::names` keeps for it (with `tracing` or `metrics`; a
    /// call that reports nothing keeps nothing).
    #[inline]
    #[cfg_attr(
        not(any(feature = "tracing", feature = "metrics")),
        allow(unused_variables, clippy::unused_self)
    )]
    pub(crate) fn set_key(&mut self, key: Option<u64>) {
        #[cfg(any(feature = "tracing", feature = "metrics"))]
        if let Some(hash) = key {
            self.keyed(hash);
        }
    }

    #[cfg(any(feature = "tracing", feature = "metrics"))]
    #[cold]
    fn keyed(&mut self, hash: u64) {
        self.key = NonZeroU64::new(names::word(hash));
        #[cfg(feature = "tracing")]
        if let Some(span) = self.span.get()
            && !span.is_disabled()
        {
            span.record("key", self.key_name().unwrap_or(names::OTHER));
        }
    }

    /// The key's name now, if the call gave a key.
    #[cfg(any(feature = "tracing", feature = "metrics"))]
    fn key_name(&self) -> Option<&'static str> {
        self.key.map(|word| names::of(word.get()))
    }

    /// Counts one of `metric`, labelled by function, by key if the call
    /// gave one, and by `reason` if given.
    #[cfg(feature = "metrics")]
    fn count(&self, metric: &'static str, reason: Option<&'static str>) {
        let mut labels = Vec::with_capacity(3);
        labels.push(metrics::Label::new("function", self.name()));
        if let Some(key) = self.key_name() {
            labels.push(metrics::Label::new("key", key));
        }
        if let Some(reason) = reason {
            labels.push(metrics::Label::new("reason", reason));
        }
        metrics::counter!(metric, labels).increment(1);
    }

    /// The call's span, made now if it was not yet, with the call's
    /// function and its key (if it gave one).
    #[cfg(feature = "tracing")]
    pub(crate) fn span(&self) -> &tracing::Span {
        self.span.get_or_init(|| {
            let key = self.key.map(|_| self.key_name().unwrap_or(names::OTHER));
            tracing::info_span!("retry", function = self.name(), key)
        })
    }

    /// Attempt number `attempt` starts: a call that ends during it (a
    /// panic, a cancellation) is counted with it.
    pub(crate) fn started(&mut self, attempt: u32) {
        self.attempts = attempt;
    }

    /// The number of the last attempt started, and whether the call's end
    /// has been reported (a call dropped midway has none).
    pub(crate) fn started_and_ended(&self) -> (u32, bool) {
        (self.attempts, self.ended)
    }

    /// After attempt `attempts` was decided [`Decision::Return`]: the
    /// call returns its outcome (what [`decided`](Self::decided) does
    /// for it, without an outcome to show).
    #[inline]
    pub(crate) fn returned(&mut self, attempts: u32) {
        self.attempts = attempts;
        self.end(Ended::Ok);
    }

    /// After attempt `attempts` was decided (`hedges` of the attempts made
    /// were hedges).
    #[cfg_attr(
        not(any(feature = "tracing", feature = "metrics")),
        allow(unused_variables, clippy::needless_pass_by_value)
    )]
    // (The verdict is told to `tracing` only.)
    #[cfg_attr(not(feature = "tracing"), allow(unused_variables))]
    pub(crate) fn decided(
        &mut self,
        attempts: u32,
        hedges: u32,
        decision: Decision,
        verdict: Option<Verdict>,
        shown: Shown<'_>,
    ) {
        self.attempts = attempts;
        match decision {
            Decision::Retry(delay) => {
                #[cfg(feature = "metrics")]
                {
                    self.slept = self.slept.saturating_add(delay);
                }
                #[cfg(feature = "tracing")]
                {
                    self.retried = true;
                    tracing::info!(
                        parent: self.span(),
                        function = self.name(),
                        attempt = attempts,
                        // Milliseconds with their fraction: a 250 µs delay is
                        // 0.25. One correctly rounded division, so 123.4 ms
                        // reads 123.4, not 123.39999999999999.
                        delay_ms = delay.as_nanos() as f64 / 1e6,
                        verdict = ?verdict.unwrap_or(Verdict::Retry),
                        error = shown.error(),
                        status = shown.status(),
                        "retrying"
                    );
                }
                #[cfg(feature = "metrics")]
                self.count("backstop_retries_total", None);
            }
            // A first round's error that no retry can fix (its attempt's,
            // or a hedge's beside it): nothing was retried, so nothing was
            // given up. Told at DEBUG, not counted.
            Decision::GiveUp(GiveUp::Stopped) if attempts <= hedges.saturating_add(1) => {
                self.not_retried(shown);
            }
            Decision::GiveUp(reason) => self.gave_up(reason, shown),
            Decision::Return => self.end(Ended::Ok),
        }
    }

    /// After attempt `attempts` (a refusal), the call holds: the token
    /// budget refused its retry, and it waits for the dependency to answer
    /// again. A DEBUG event (every call of a restart holds: one INFO event
    /// each would flood the logs), and `backstop_held_total`; the retry
    /// itself is counted, and told at INFO, when the call is
    /// [released](Self::released).
    #[cfg_attr(not(feature = "tracing"), allow(unused_variables))]
    pub(crate) fn held(&mut self, attempts: u32, first_wait: Duration, shown: Shown<'_>) {
        self.attempts = attempts;
        self.waits(first_wait);
        #[cfg(feature = "tracing")]
        tracing::debug!(
            parent: self.span(),
            function = self.name(),
            attempt = attempts,
            error = shown.error(),
            status = shown.status(),
            "holding until the dependency answers"
        );
        #[cfg(feature = "metrics")]
        self.count("backstop_held_total", None);
    }

    /// A held call waits `wait` more: counted as slept.
    #[cfg_attr(not(feature = "metrics"), allow(unused_variables, clippy::unused_self))]
    pub(crate) fn waits(&mut self, wait: Duration) {
        #[cfg(feature = "metrics")]
        {
            self.slept = self.slept.saturating_add(wait);
        }
    }

    /// A held call is released: its retry goes now. An INFO event
    /// ("retrying", as for any retry, without a delay), and
    /// `backstop_retries_total`.
    #[cfg_attr(
        not(any(feature = "tracing", feature = "metrics")),
        allow(clippy::unused_self)
    )]
    pub(crate) fn released(&mut self) {
        #[cfg(feature = "tracing")]
        {
            self.retried = true;
            tracing::info!(
                parent: self.span(),
                function = self.name(),
                attempt = self.attempts,
                verdict = ?Verdict::Refused,
                "retrying"
            );
        }
        #[cfg(feature = "metrics")]
        self.count("backstop_retries_total", None);
    }

    /// Hedge number `attempt` was sent beside the slow attempt(s), `delay`
    /// after the one before: a DEBUG event, and `backstop_hedges_total`.
    #[cfg(any(feature = "tokio", feature = "async-io", feature = "custom-timer"))]
    #[cfg_attr(not(feature = "tracing"), allow(unused_variables))]
    pub(crate) fn hedged(&mut self, attempt: u32, delay: Duration) {
        self.attempts = self.attempts.max(attempt);
        #[cfg(feature = "tracing")]
        tracing::debug!(
            parent: self.span(),
            function = self.name(),
            attempt,
            // (As a retry's delay: milliseconds with their fraction.)
            delay_ms = delay.as_nanos() as f64 / 1e6,
            "hedging"
        );
        #[cfg(feature = "metrics")]
        self.count("backstop_hedges_total", None);
    }

    /// The call sends no hedge, for `reason` (its operation is not
    /// idempotent, or cannot be copied): a DEBUG event.
    #[cfg(any(feature = "tokio", feature = "async-io", feature = "custom-timer"))]
    #[cfg_attr(not(feature = "tracing"), allow(unused_variables, clippy::unused_self))]
    pub(crate) fn hedge_refused(&self, reason: GiveUp) {
        self.hedge_not_told(reason.as_str());
    }

    /// A hedge not sent, for `reason`: a DEBUG event.
    #[cfg(any(feature = "tokio", feature = "async-io", feature = "custom-timer"))]
    #[cfg_attr(not(feature = "tracing"), allow(unused_variables, clippy::unused_self))]
    fn hedge_not_told(&self, reason: &'static str) {
        #[cfg(feature = "tracing")]
        tracing::debug!(
            parent: self.span(),
            function = self.name(),
            reason,
            "hedge not sent"
        );
    }

    /// A hedge was due (its delay passed, no attempt answered) and not
    /// sent, for `reason`: a DEBUG event, and
    /// `backstop_hedges_refused_total`.
    #[cfg(any(feature = "tokio", feature = "async-io", feature = "custom-timer"))]
    pub(crate) fn hedge_not_sent(&self, reason: crate::state::vocabulary::NotSent) {
        self.hedge_not_told(reason.as_str());
        #[cfg(feature = "metrics")]
        self.count("backstop_hedges_refused_total", Some(reason.as_str()));
    }

    /// Attempt `attempt` failed retryably while others were still in
    /// flight: they go on (a DEBUG event).
    #[cfg(any(feature = "tokio", feature = "async-io", feature = "custom-timer"))]
    #[cfg_attr(not(feature = "tracing"), allow(unused_variables, clippy::unused_self))]
    pub(crate) fn failed_beside(&self, attempt: u32, verdict: Option<Verdict>) {
        #[cfg(feature = "tracing")]
        tracing::debug!(
            parent: self.span(),
            function = self.name(),
            attempt,
            verdict = ?verdict,
            "attempt failed, others still in flight"
        );
    }

    /// Hedge number `attempt` answered first: a DEBUG event, and
    /// `backstop_hedge_wins_total`.
    #[cfg(any(feature = "tokio", feature = "async-io", feature = "custom-timer"))]
    #[cfg_attr(
        not(any(feature = "tracing", feature = "metrics")),
        allow(clippy::unused_self)
    )]
    // (The attempt is told to `tracing` only.)
    #[cfg_attr(not(feature = "tracing"), allow(unused_variables))]
    pub(crate) fn hedge_won(&self, attempt: u32) {
        #[cfg(feature = "tracing")]
        tracing::debug!(parent: self.span(), function = self.name(), attempt, "a hedge answered first");
        #[cfg(feature = "metrics")]
        self.count("backstop_hedge_wins_total", None);
    }

    /// The first attempt failed with an error that no retry can fix.
    #[cfg_attr(not(feature = "tracing"), allow(unused_variables))]
    fn not_retried(&mut self, shown: Shown<'_>) {
        #[cfg(feature = "tracing")]
        tracing::debug!(
            parent: self.span(),
            function = self.name(),
            reason = GiveUp::Stopped.as_str(),
            error = shown.error(),
            status = shown.status(),
            "not retried"
        );
        self.end(Ended::Error);
    }

    /// The call was turned away before its first attempt (the breaker, the
    /// adaptive throttle): a DEBUG event, and `backstop_rejections_total`.
    #[cfg_attr(
        not(any(feature = "tracing", feature = "metrics")),
        allow(unused_variables, clippy::needless_pass_by_value)
    )]
    pub(crate) fn rejected(&mut self, reason: GiveUp) {
        #[cfg(feature = "tracing")]
        tracing::debug!(
            parent: self.span(),
            function = self.name(),
            reason = reason.as_str(),
            "rejected"
        );
        #[cfg(feature = "metrics")]
        self.count("backstop_rejections_total", Some(reason.as_str()));
        self.end(Ended::Error);
    }

    /// The call gave up for `reason` (after a decision, a rejection by the
    /// breaker, or waking too late). An INFO event if it told a retry (so
    /// that a call that told a retry at INFO tells its give-up at INFO,
    /// whatever came after the sleep), a DEBUG one if it did not (the budget or an open breaker
    /// refused its first retry, it was not idempotent, it held and gave up
    /// without being released, a hedge alone was sent): an outage fails
    /// every call so, and one INFO event each would flood the logs, where
    /// retries are bounded by the budget. Counted either way. `shown`: the
    /// last outcome, when the give-up is decided on it.
    #[cfg_attr(not(feature = "tracing"), allow(unused_variables))]
    pub(crate) fn gave_up(&mut self, reason: GiveUp, shown: Shown<'_>) {
        #[cfg(feature = "tracing")]
        if self.retried {
            tracing::info!(
                parent: self.span(),
                function = self.name(),
                attempts = self.attempts,
                reason = reason.as_str(),
                error = shown.error(),
                status = shown.status(),
                "giving up"
            );
        } else {
            tracing::debug!(
                parent: self.span(),
                function = self.name(),
                attempts = self.attempts,
                reason = reason.as_str(),
                error = shown.error(),
                status = shown.status(),
                "giving up"
            );
        }
        #[cfg(feature = "metrics")]
        {
            self.count("backstop_give_ups_total", Some(reason.as_str()));
            if reason == GiveUp::Budget {
                self.count("backstop_budget_refusals_total", None);
            }
        }
        let _ = reason;
        self.end(Ended::Error);
    }

    /// The call is over: count it, its attempts and its sleeps, once. On
    /// the success path, with static labels: no allocation.
    #[cfg_attr(not(feature = "metrics"), allow(unused_variables))]
    fn end(&mut self, how: Ended) {
        let ended = std::mem::replace(&mut self.ended, true);
        #[cfg(feature = "metrics")]
        if !ended {
            static METADATA: metrics::Metadata<'static> =
                metrics::Metadata::new(module_path!(), metrics::Level::INFO, Some(module_path!()));
            // (By function only, with its static labels: a call that
            // succeeds allocates nothing, keyed or not.)
            let (who, name) = (self.who, self.name());
            let (attempts, slept) = (f64::from(self.attempts), self.slept.as_secs_f64());
            metrics::with_recorder(|recorder| {
                describe_to_new(recorder);
                let function = match who {
                    Who::Function(function) => Some(function),
                    Who::Named(name) => named(name),
                };
                let key = |metric: &'static str| match function {
                    Some(function) => metrics::Key::from_static_parts(metric, &function.labels),
                    // Past the names kept: labels of its own (this allocates).
                    None => metrics::Key::from_parts(
                        metric,
                        vec![metrics::Label::new("function", name)],
                    ),
                };
                let calls = match function {
                    Some(function) => metrics::Key::from_static_parts(
                        "backstop_calls_total",
                        &function.ended[how as usize],
                    ),
                    None => metrics::Key::from_parts(
                        "backstop_calls_total",
                        vec![
                            metrics::Label::new("function", name),
                            metrics::Label::from_static_parts("outcome", how.as_str()),
                        ],
                    ),
                };
                recorder.register_counter(&calls, &METADATA).increment(1);
                recorder
                    .register_histogram(&key("backstop_attempts"), &METADATA)
                    .record(attempts);
                recorder
                    .register_histogram(&key("backstop_slept_seconds"), &METADATA)
                    .record(slept);
            });
        }
    }
}

/// The recorder the metrics were last described to, by address: 0 for
/// none yet.
#[cfg(feature = "metrics")]
static DESCRIBED_TO: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

/// Describes the metrics to `recorder` if they were not described to it
/// last ([`describe`]): at the first call's end, and again at the first
/// call that ends under another recorder (one installed after a call
/// made at start-up, or a test's own). One load when they were; no lock
/// (a recorder that panics, or ends a call itself, as it describes blocks
/// nothing), and each recorder in turn may be told twice when calls race
/// under two.
#[cfg(feature = "metrics")]
#[inline]
fn describe_to_new(recorder: &dyn metrics::Recorder) {
    use std::sync::atomic::Ordering::Relaxed;
    let address = std::ptr::from_ref(recorder).cast::<()>() as usize;
    if DESCRIBED_TO.load(Relaxed) != address && DESCRIBED_TO.swap(address, Relaxed) != address {
        describe(recorder);
    }
}

/// Tells `recorder` what each metric counts, and its unit (a recorder
/// that exports them, as Prometheus's, shows them as `HELP` lines).
#[cfg(feature = "metrics")]
#[cold]
fn describe(recorder: &dyn metrics::Recorder) {
    use metrics::Unit;
    let counters: [(&'static str, &'static str); 10] = [
        (
            "backstop_calls_total",
            "Calls ended, by function and outcome (ok, error, dropped)",
        ),
        (
            "backstop_retries_total",
            "Retries decided (a held call's, when released)",
        ),
        (
            "backstop_held_total",
            "Holds of refused calls whose retry the token budget refused (again after each released retry refused again)",
        ),
        (
            "backstop_give_ups_total",
            "Calls that stopped retrying, by reason",
        ),
        (
            "backstop_rejections_total",
            "Calls turned away before their first attempt (breaker, adaptive throttle), by reason",
        ),
        (
            "backstop_budget_refusals_total",
            "Give-ups because the retry budget refused the retry",
        ),
        (
            "backstop_hedges_total",
            "Hedged attempts started (one that lost the race before its request went out included)",
        ),
        (
            "backstop_hedge_wins_total",
            "Calls a hedged attempt answered first",
        ),
        (
            "backstop_hedges_refused_total",
            "Hedges due (their delay passed, no attempt answered) and not sent, by reason",
        ),
        (
            "backstop_keys_unplaced_total",
            "Calls whose key found no place in a full Keyed table, and went without a breaker or an adaptive throttle, or drew on a shared budget",
        ),
    ];
    for (name, help) in counters {
        recorder.describe_counter(name.into(), Some(Unit::Count), help.into());
    }
    recorder.describe_histogram(
        "backstop_attempts".into(),
        Some(Unit::Count),
        "Attempts per call".into(),
    );
    // (No unit: the name says it, and an exporter that appends units to
    // names would make it `_seconds_seconds`.)
    recorder.describe_histogram(
        "backstop_slept_seconds".into(),
        None,
        "Seconds a call decided to wait between attempts, on its clock".into(),
    );
    recorder.describe_gauge(
        "backstop_breakers_open".into(),
        None,
        "Circuit breakers not closed: 1 per breaker (and key) while open, half-open or held open"
            .into(),
    );
}

/// A call that ends without a decision (its future dropped midway, its
/// attempt panicking) is still counted.
#[cfg(feature = "metrics")]
impl Drop for Observe {
    fn drop(&mut self) {
        self.end(Ended::Dropped);
    }
}

/// A retry about to happen: reported after an attempt failed (or returned
/// an `Ok` value that `when_ok` retries), before the sleep. A call held
/// after a refusal (its token budget refused the retry: see
/// [`TokenBudget::ride_out`](crate::limit::TokenBudget::ride_out)) is
/// reported once as it starts to hold, its [`delay`](Self::delay) the
/// first wait, and not again when it is released and its retry goes.
///
/// ```
/// # extern crate backstop_runtime as backstop;
/// use std::time::Duration;
/// use backstop::{testing::VirtualTime, Jitter, Policy, Retry, RetryEvent};
/// let _vt = VirtualTime::start();
///
/// let policy = Policy::new().jitter(Jitter::None).no_budget();
/// let seen = std::cell::RefCell::new(Vec::new());
/// let _ = Retry::new(&policy)
///     .on_retry(|event: &RetryEvent<'_, (), std::io::Error>| {
///         seen.borrow_mut().push((event.attempt(), event.delay()));
///     })
///     .call(|| Err::<(), _>(std::io::Error::from(std::io::ErrorKind::ConnectionRefused)));
/// let ms = Duration::from_millis;
/// assert_eq!(*seen.borrow(), [(1, ms(100)), (2, ms(200))]);
/// ```
pub struct RetryEvent<'a, T, E> {
    pub(crate) attempt: u32,
    pub(crate) hedges: u32,
    pub(crate) delay: Duration,
    pub(crate) verdict: Verdict,
    pub(crate) outcome: Result<&'a T, &'a E>,
    pub(crate) elapsed: Duration,
}

impl<'a, T, E> RetryEvent<'a, T, E> {
    /// The attempt that failed (1-based); the next one is `attempt() + 1`.
    /// With hedges, the last attempt started: hedges are attempts too.
    ///
    /// ```
    /// # extern crate backstop_runtime as backstop;
    /// use std::io::{Error, ErrorKind};
    /// use backstop::{testing::VirtualTime, Jitter, Policy, Retry, RetryEvent};
    /// let _vt = VirtualTime::start();
    /// let policy = Policy::new().attempts(2).jitter(Jitter::None);
    /// let seen = std::cell::RefCell::new(Vec::new());
    /// let _ = Retry::new(&policy)
    ///     .on_retry(|event: &RetryEvent<'_, (), Error>| seen.borrow_mut().push(event.attempt()))
    ///     .call(|| Err::<(), _>(Error::from(ErrorKind::HostUnreachable)));
    /// assert_eq!(*seen.borrow(), [1]);
    /// ```
    pub fn attempt(&self) -> u32 {
        self.attempt
    }

    /// Hedges sent so far in this call (always 0 without
    /// [`hedge`](crate::Retry::hedge)): of [`attempt`](Self::attempt)
    /// attempts, this many were hedges.
    ///
    /// ```
    /// # extern crate backstop_runtime as backstop;
    /// use std::io::{Error, ErrorKind};
    /// use backstop::{testing::VirtualTime, Jitter, Policy, Retry, RetryEvent};
    /// let _vt = VirtualTime::start();
    /// let policy = Policy::new().attempts(2).jitter(Jitter::None);
    /// let seen = std::cell::RefCell::new(Vec::new());
    /// let _ = Retry::new(&policy)
    ///     .on_retry(|event: &RetryEvent<'_, (), Error>| seen.borrow_mut().push(event.hedges()))
    ///     .call(|| Err::<(), _>(Error::from(ErrorKind::HostUnreachable)));
    /// assert_eq!(*seen.borrow(), [0]);
    /// ```
    pub fn hedges(&self) -> u32 {
        self.hedges
    }

    /// How long the loop sleeps before the next attempt.
    ///
    /// ```
    /// # extern crate backstop_runtime as backstop;
    /// use std::io::{Error, ErrorKind};
    /// use backstop::{testing::VirtualTime, Jitter, Policy, Retry, RetryEvent};
    /// let _vt = VirtualTime::start();
    /// let policy = Policy::new().attempts(2).jitter(Jitter::None);
    /// let seen = std::cell::RefCell::new(Vec::new());
    /// let _ = Retry::new(&policy)
    ///     .on_retry(|event: &RetryEvent<'_, (), Error>| seen.borrow_mut().push(event.delay()))
    ///     .call(|| Err::<(), _>(Error::from(ErrorKind::HostUnreachable)));
    /// assert_eq!(*seen.borrow(), [std::time::Duration::from_millis(100)]);
    /// ```
    pub fn delay(&self) -> Duration {
        self.delay
    }

    /// Why it is retried: `Retry`, `RetryAfter(d)` or `RetryIfIdempotent`.
    ///
    /// ```
    /// # extern crate backstop_runtime as backstop;
    /// use std::io::{Error, ErrorKind};
    /// use backstop::{testing::VirtualTime, Jitter, Policy, Retry, RetryEvent, Verdict};
    /// let _vt = VirtualTime::start();
    /// let policy = Policy::new().attempts(2).jitter(Jitter::None);
    /// let seen = std::cell::RefCell::new(Vec::new());
    /// let _ = Retry::new(&policy)
    ///     .on_retry(|event: &RetryEvent<'_, (), Error>| seen.borrow_mut().push(event.verdict()))
    ///     .call(|| Err::<(), _>(Error::from(ErrorKind::HostUnreachable)));
    /// assert_eq!(*seen.borrow(), [Verdict::Retry]);
    /// ```
    pub fn verdict(&self) -> Verdict {
        self.verdict
    }

    /// The failed attempt's outcome: its error, or the `Ok` value that
    /// `when_ok` retries.
    ///
    /// # Errors
    ///
    /// The attempt's error, when it failed with one.
    ///
    /// ```
    /// # extern crate backstop_runtime as backstop;
    /// use std::io::{Error, ErrorKind};
    /// use backstop::{testing::VirtualTime, Jitter, Policy, Retry, RetryEvent};
    /// let _vt = VirtualTime::start();
    /// let policy = Policy::new().attempts(2).jitter(Jitter::None);
    /// let seen = std::cell::RefCell::new(Vec::new());
    /// let _ = Retry::new(&policy)
    ///     .on_retry(|event: &RetryEvent<'_, (), Error>| seen.borrow_mut().push(event.outcome().is_err()))
    ///     .call(|| Err::<(), _>(Error::from(ErrorKind::HostUnreachable)));
    /// assert_eq!(*seen.borrow(), [true]);
    /// ```
    pub fn outcome(&self) -> Result<&'a T, &'a E> {
        self.outcome
    }

    /// The error, if the attempt failed with one.
    ///
    /// ```
    /// # extern crate backstop_runtime as backstop;
    /// use std::io::{Error, ErrorKind};
    /// use backstop::{testing::VirtualTime, Jitter, Policy, Retry, RetryEvent};
    /// let _vt = VirtualTime::start();
    /// let policy = Policy::new().attempts(2).jitter(Jitter::None);
    /// let seen = std::cell::RefCell::new(Vec::new());
    /// let _ = Retry::new(&policy)
    ///     .on_retry(|event: &RetryEvent<'_, (), Error>| seen.borrow_mut().push(event.error().map(Error::kind)))
    ///     .call(|| Err::<(), _>(Error::from(ErrorKind::HostUnreachable)));
    /// assert_eq!(*seen.borrow(), [Some(ErrorKind::HostUnreachable)]);
    /// ```
    pub fn error(&self) -> Option<&'a E> {
        self.outcome.err()
    }

    /// Time since the call began. With a deadline of a second or more the
    /// start is read from the coarse clock
    /// ([`Clock::start_now`](crate::time::Clock::start_now)), so this can read a
    /// few milliseconds high.
    ///
    /// ```
    /// # extern crate backstop_runtime as backstop;
    /// use std::io::{Error, ErrorKind};
    /// use backstop::{testing::VirtualTime, Jitter, Policy, Retry, RetryEvent};
    /// let _vt = VirtualTime::start();
    /// let policy = Policy::new().attempts(2).jitter(Jitter::None);
    /// let seen = std::cell::RefCell::new(Vec::new());
    /// let _ = Retry::new(&policy)
    ///     .on_retry(|event: &RetryEvent<'_, (), Error>| seen.borrow_mut().push(event.elapsed()))
    ///     .call(|| {
    ///         _vt.advance(std::time::Duration::from_millis(30)); // the attempt takes 30 ms
    ///         Err::<(), _>(Error::from(ErrorKind::HostUnreachable))
    ///     });
    /// assert_eq!(*seen.borrow(), [std::time::Duration::from_millis(30)]);
    /// ```
    pub fn elapsed(&self) -> Duration {
        self.elapsed
    }
}

impl<T, E> fmt::Debug for RetryEvent<'_, T, E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RetryEvent")
            .field("attempt", &self.attempt)
            .field("hedges", &self.hedges)
            .field("delay", &self.delay)
            .field("verdict", &self.verdict)
            .field("ok", &self.outcome.is_ok())
            .field("elapsed", &self.elapsed)
            .finish_non_exhaustive()
    }
}

/// A call that stopped retrying and returns its last outcome, with the
/// reason. Not reported for an outcome the call returns as an answer: a
/// success, or an `Ok` value no `when_ok` asked to retry, even after
/// retries (a 507 after a retried 503, which a retrying call around it
/// does not retry: [`GiveUp::RetriedBelow`](crate::GiveUp::RetriedBelow)).
///
/// ```
/// # extern crate backstop_runtime as backstop;
/// use backstop::{testing::VirtualTime, GiveUp, GiveUpEvent, Policy, Retry};
/// let _vt = VirtualTime::start();
///
/// let policy = Policy::new().attempts(2).no_budget();
/// let reasons = std::cell::RefCell::new(Vec::new());
/// let _ = Retry::new(&policy)
///     .on_give_up(|event: &GiveUpEvent<'_, (), std::io::Error>| {
///         reasons.borrow_mut().push((event.reason(), event.attempts()));
///     })
///     .call(|| Err::<(), _>(std::io::Error::from(std::io::ErrorKind::ConnectionRefused)));
/// assert_eq!(*reasons.borrow(), [(GiveUp::Attempts, 2)]);
/// ```
pub struct GiveUpEvent<'a, T, E> {
    pub(crate) attempts: u32,
    pub(crate) hedges: u32,
    pub(crate) reason: GiveUp,
    pub(crate) outcome: Result<&'a T, &'a E>,
    pub(crate) elapsed: Duration,
}

impl<'a, T, E> GiveUpEvent<'a, T, E> {
    /// Attempts made, the last included (hedges too).
    ///
    /// ```
    /// # extern crate backstop_runtime as backstop;
    /// use std::io::{Error, ErrorKind};
    /// use backstop::{testing::VirtualTime, GiveUpEvent, Jitter, Policy, Retry};
    /// let _vt = VirtualTime::start();
    /// let policy = Policy::new().attempts(2).jitter(Jitter::None);
    /// let seen = std::cell::RefCell::new(Vec::new());
    /// let _ = Retry::new(&policy)
    ///     .on_give_up(|event: &GiveUpEvent<'_, (), Error>| seen.borrow_mut().push(event.attempts()))
    ///     .call(|| Err::<(), _>(Error::from(ErrorKind::HostUnreachable)));
    /// assert_eq!(*seen.borrow(), [2]);
    /// ```
    pub fn attempts(&self) -> u32 {
        self.attempts
    }

    /// Of [`attempts`](Self::attempts), how many were hedges (always 0
    /// without [`hedge`](crate::Retry::hedge)).
    ///
    /// ```
    /// # extern crate backstop_runtime as backstop;
    /// use std::io::{Error, ErrorKind};
    /// use backstop::{testing::VirtualTime, GiveUpEvent, Jitter, Policy, Retry};
    /// let _vt = VirtualTime::start();
    /// let policy = Policy::new().attempts(2).jitter(Jitter::None);
    /// let seen = std::cell::RefCell::new(Vec::new());
    /// let _ = Retry::new(&policy)
    ///     .on_give_up(|event: &GiveUpEvent<'_, (), Error>| seen.borrow_mut().push(event.hedges()))
    ///     .call(|| Err::<(), _>(Error::from(ErrorKind::HostUnreachable)));
    /// assert_eq!(*seen.borrow(), [0]);
    /// ```
    pub fn hedges(&self) -> u32 {
        self.hedges
    }

    /// Why retrying stopped.
    ///
    /// ```
    /// # extern crate backstop_runtime as backstop;
    /// use std::io::{Error, ErrorKind};
    /// use backstop::{testing::VirtualTime, GiveUpEvent, Jitter, Policy, Retry, GiveUp};
    /// let _vt = VirtualTime::start();
    /// let policy = Policy::new().attempts(2).jitter(Jitter::None);
    /// let seen = std::cell::RefCell::new(Vec::new());
    /// let _ = Retry::new(&policy)
    ///     .on_give_up(|event: &GiveUpEvent<'_, (), Error>| seen.borrow_mut().push(event.reason()))
    ///     .call(|| Err::<(), _>(Error::from(ErrorKind::HostUnreachable)));
    /// assert_eq!(*seen.borrow(), [GiveUp::Attempts]);
    /// ```
    pub fn reason(&self) -> GiveUp {
        self.reason
    }

    /// The outcome the call returns.
    ///
    /// # Errors
    ///
    /// The error the call returns, when it is one.
    ///
    /// ```
    /// # extern crate backstop_runtime as backstop;
    /// use std::io::{Error, ErrorKind};
    /// use backstop::{testing::VirtualTime, GiveUpEvent, Jitter, Policy, Retry};
    /// let _vt = VirtualTime::start();
    /// let policy = Policy::new().attempts(2).jitter(Jitter::None);
    /// let seen = std::cell::RefCell::new(Vec::new());
    /// let _ = Retry::new(&policy)
    ///     .on_give_up(|event: &GiveUpEvent<'_, (), Error>| seen.borrow_mut().push(event.outcome().is_err()))
    ///     .call(|| Err::<(), _>(Error::from(ErrorKind::HostUnreachable)));
    /// assert_eq!(*seen.borrow(), [true]);
    /// ```
    pub fn outcome(&self) -> Result<&'a T, &'a E> {
        self.outcome
    }

    /// The error the call returns, if it is one.
    ///
    /// ```
    /// # extern crate backstop_runtime as backstop;
    /// use std::io::{Error, ErrorKind};
    /// use backstop::{testing::VirtualTime, GiveUpEvent, Jitter, Policy, Retry};
    /// let _vt = VirtualTime::start();
    /// let policy = Policy::new().attempts(2).jitter(Jitter::None);
    /// let seen = std::cell::RefCell::new(Vec::new());
    /// let _ = Retry::new(&policy)
    ///     .on_give_up(|event: &GiveUpEvent<'_, (), Error>| seen.borrow_mut().push(event.error().map(Error::kind)))
    ///     .call(|| Err::<(), _>(Error::from(ErrorKind::HostUnreachable)));
    /// assert_eq!(*seen.borrow(), [Some(ErrorKind::HostUnreachable)]);
    /// ```
    pub fn error(&self) -> Option<&'a E> {
        self.outcome.err()
    }

    /// Time since the call began. With a deadline of a second or more the
    /// start is read from the coarse clock
    /// ([`Clock::start_now`](crate::time::Clock::start_now)), so this can read a
    /// few milliseconds high.
    ///
    /// ```
    /// # extern crate backstop_runtime as backstop;
    /// use std::io::{Error, ErrorKind};
    /// use backstop::{testing::VirtualTime, GiveUpEvent, Jitter, Policy, Retry};
    /// let _vt = VirtualTime::start();
    /// let policy = Policy::new().attempts(2).jitter(Jitter::None);
    /// let seen = std::cell::RefCell::new(Vec::new());
    /// let _ = Retry::new(&policy)
    ///     .on_give_up(|event: &GiveUpEvent<'_, (), Error>| seen.borrow_mut().push(event.elapsed()))
    ///     .call(|| Err::<(), _>(Error::from(ErrorKind::HostUnreachable)));
    /// // Two attempts, 100 ms of sleep between them.
    /// assert_eq!(*seen.borrow(), [std::time::Duration::from_millis(100)]);
    /// ```
    pub fn elapsed(&self) -> Duration {
        self.elapsed
    }
}

impl<T, E> fmt::Debug for GiveUpEvent<'_, T, E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("GiveUpEvent")
            .field("attempts", &self.attempts)
            .field("hedges", &self.hedges)
            .field("reason", &self.reason)
            .field("ok", &self.outcome.is_ok())
            .field("elapsed", &self.elapsed)
            .finish_non_exhaustive()
    }
}

/// A hook that ignores what it is told: the default of [`Retry`](crate::Retry).
///
/// ```
/// # extern crate backstop_runtime as backstop;
/// use backstop::builder::Ignore;
/// use backstop::classify::{ByClassify, NeverRetry};
/// use backstop::builder::NoBreaker;
/// use backstop::{Policy, Retry};
///
/// static POLICY: Policy = Policy::new();
/// // Neither hook set: both are `Ignore`.
/// let quiet: Retry<'static, ByClassify, NeverRetry, NoBreaker, Ignore, Ignore> = Retry::new(&POLICY);
/// let out: Result<u8, std::io::Error> = quiet.call(|| Ok(1));
/// assert_eq!(out.unwrap(), 1);
/// ```
#[derive(Clone, Copy, Debug, Default)]
pub struct Ignore;

/// Something told about retries: a closure `Fn(&RetryEvent<'_, T, E>)`,
/// or [`Ignore`]. `on_retry` takes a closure (so that its argument's type
/// is inferred): a hook of a type of your own is given as one that tells
/// it (`.on_retry(move |e| hooks.on_retry(e))`), `Clone` when what it
/// captures is.
///
/// ```
/// # extern crate backstop_runtime as backstop;
/// use std::cell::Cell;
/// use std::io::{Error, ErrorKind};
/// use backstop::{Policy, Retry, RetryEvent, testing::VirtualTime};
///
/// let _vt = VirtualTime::start();
/// let told = Cell::new(0);
/// // The closure is the loop's `OnRetry`: told before each sleep.
/// let out: Result<u8, Error> = Retry::new(&Policy::new())
///     .on_retry(|event: &RetryEvent<'_, u8, Error>| told.set(event.attempt()))
///     .call(|| Err(ErrorKind::HostUnreachable.into()));
/// assert!(out.is_err());
/// assert_eq!(told.get(), 2, "told after the first and the second of three attempts");
/// ```
pub trait OnRetry<T, E> {
    /// Tells it.
    fn on_retry(&self, event: &RetryEvent<'_, T, E>);
}

impl<T, E> OnRetry<T, E> for Ignore {
    fn on_retry(&self, _: &RetryEvent<'_, T, E>) {}
}

impl<T, E, F: Fn(&RetryEvent<'_, T, E>)> OnRetry<T, E> for F {
    fn on_retry(&self, event: &RetryEvent<'_, T, E>) {
        self(event);
    }
}

/// Something told when a call gives up: a closure
/// `Fn(&GiveUpEvent<'_, T, E>)`, or [`Ignore`]; a hook of a type of your
/// own is given to `on_give_up` as a closure that tells it, as for
/// [`OnRetry`].
///
/// ```
/// # extern crate backstop_runtime as backstop;
/// use std::cell::Cell;
/// use std::io::{Error, ErrorKind};
/// use backstop::{GiveUp, GiveUpEvent, Policy, Retry, testing::VirtualTime};
///
/// let _vt = VirtualTime::start();
/// let reason = Cell::new(None);
/// // The closure is the loop's `OnGiveUp`: told once, with the reason.
/// let out: Result<u8, Error> = Retry::new(&Policy::new())
///     .on_give_up(|event: &GiveUpEvent<'_, u8, Error>| reason.set(Some(event.reason())))
///     .call(|| Err(ErrorKind::HostUnreachable.into()));
/// assert!(out.is_err());
/// assert_eq!(reason.get(), Some(GiveUp::Attempts));
/// ```
pub trait OnGiveUp<T, E> {
    /// Tells it.
    fn on_give_up(&self, event: &GiveUpEvent<'_, T, E>);
}

impl<T, E> OnGiveUp<T, E> for Ignore {
    fn on_give_up(&self, _: &GiveUpEvent<'_, T, E>) {}
}

impl<T, E, F: Fn(&GiveUpEvent<'_, T, E>)> OnGiveUp<T, E> for F {
    fn on_give_up(&self, event: &GiveUpEvent<'_, T, E>) {
        self(event);
    }
}

#[cfg(all(test, feature = "metrics"))]
mod tests {
    use super::*;

    /// A name given at run time keeps one `Function` for the life of the
    /// process, for as many names as are kept; past them, none.
    #[test]
    fn the_first_names_given_at_run_time_keep_static_labels() {
        // (Other tests of this process may have taken some places.)
        let names: Vec<&'static str> = (0..=NAMES_KEPT)
            .map(|i| &*Box::leak(format!("named-{i}").into_boxed_str()))
            .collect();
        let kept: Vec<Option<&'static Function>> = names.iter().map(|name| named(name)).collect();
        for (name, function) in names.iter().zip(&kept) {
            if let Some(function) = function {
                assert_eq!(function.name(), *name);
                assert!(std::ptr::eq(*function, named(name).unwrap()));
            }
        }
        let first = kept[0].expect("the first name of this test finds a place");
        // Its labels are the name's, and the same text elsewhere finds it.
        assert_eq!(first.labels[0].value(), "named-0");
        let again: &'static str = String::from("named-0").leak();
        assert!(std::ptr::eq(first, named(again).unwrap()));
        assert!(
            kept[NAMES_KEPT].is_none(),
            "past {NAMES_KEPT} names, none is kept"
        );
    }

    /// Every metric the crate records is described (its `HELP` line), with
    /// its kind and unit.
    #[test]
    fn every_metric_is_described() {
        use std::sync::Mutex;

        use metrics::{KeyName, SharedString, Unit};

        #[derive(Default)]
        struct Described(Mutex<Vec<(String, &'static str, Option<Unit>)>>);

        impl Described {
            fn note(&self, key: &KeyName, kind: &'static str, unit: Option<Unit>) {
                self.0
                    .lock()
                    .unwrap()
                    .push((key.as_str().to_owned(), kind, unit));
            }
        }

        impl metrics::Recorder for Described {
            fn describe_counter(&self, key: KeyName, unit: Option<Unit>, _: SharedString) {
                self.note(&key, "counter", unit);
            }
            fn describe_gauge(&self, key: KeyName, unit: Option<Unit>, _: SharedString) {
                self.note(&key, "gauge", unit);
            }
            fn describe_histogram(&self, key: KeyName, unit: Option<Unit>, _: SharedString) {
                self.note(&key, "histogram", unit);
            }
            fn register_counter(
                &self,
                _: &metrics::Key,
                _: &metrics::Metadata<'_>,
            ) -> metrics::Counter {
                metrics::Counter::noop()
            }
            fn register_gauge(
                &self,
                _: &metrics::Key,
                _: &metrics::Metadata<'_>,
            ) -> metrics::Gauge {
                metrics::Gauge::noop()
            }
            fn register_histogram(
                &self,
                _: &metrics::Key,
                _: &metrics::Metadata<'_>,
            ) -> metrics::Histogram {
                metrics::Histogram::noop()
            }
        }

        let recorder = Described::default();
        describe(&recorder);
        let mut described = recorder.0.into_inner().unwrap();
        described.sort_by(|a, b| a.0.cmp(&b.0));
        let kinds: Vec<(&str, &str)> = described.iter().map(|(n, k, _)| (n.as_str(), *k)).collect();
        // The manual's list ("Observing retries"), and the breakers' gauge.
        assert_eq!(
            kinds,
            [
                ("backstop_attempts", "histogram"),
                ("backstop_breakers_open", "gauge"),
                ("backstop_budget_refusals_total", "counter"),
                ("backstop_calls_total", "counter"),
                ("backstop_give_ups_total", "counter"),
                ("backstop_hedge_wins_total", "counter"),
                ("backstop_hedges_refused_total", "counter"),
                ("backstop_hedges_total", "counter"),
                ("backstop_held_total", "counter"),
                ("backstop_keys_unplaced_total", "counter"),
                ("backstop_rejections_total", "counter"),
                ("backstop_retries_total", "counter"),
                ("backstop_slept_seconds", "histogram"),
            ]
        );
        let unit = |name: &str| {
            described
                .iter()
                .find(|(n, _, _)| n == name)
                .and_then(|d| d.2)
        };
        assert_eq!(unit("backstop_attempts"), Some(Unit::Count));
        assert_eq!(unit("backstop_retries_total"), Some(Unit::Count));
        // (Its name says it: an exporter appending units would repeat it.)
        assert_eq!(unit("backstop_slept_seconds"), None);
    }
}

#[cfg(test)]
mod redaction {
    use super::write_redacted;

    fn redacted(text: &str) -> String {
        let mut out = String::new();
        write_redacted(text, &mut out).unwrap();
        out
    }

    #[test]
    fn urls_lose_their_query_fragment_and_user_info_and_nothing_else() {
        assert_eq!(
            redacted(
                "error sending request for url (http://127.0.0.1:80/users/7?token=SECRET): refused"
            ),
            "error sending request for url (http://127.0.0.1:80/users/7): refused"
        );
        assert_eq!(
            redacted("a: https://user:pass@db.internal/x#frag b: http://h?k=v and ftp://h/p"),
            "a: https://db.internal/x b: http://h and ftp://h/p"
        );
        // Commas, semicolons and quotes in a query or a password are cut
        // with it.
        assert_eq!(
            redacted("(http://h/a?ids=1,2&token=SECRET) (http://h/a?q='x'&token=SECRET)"),
            "(http://h/a) (http://h/a)"
        );
        assert_eq!(
            redacted("redis://:pa;SECRET@cache:6379/0 postgres://app:pa,SECRET@db/orders"),
            "redis://cache:6379/0 postgres://db/orders"
        );
        assert_eq!(
            redacted("twice: http://a/?s=1 http://b/?s=2"),
            "twice: http://a/ http://b/"
        );
        assert_eq!(redacted("no url: a?b=c"), "no url: a?b=c");
        assert_eq!(redacted("ends with ://"), "ends with ://");
        assert_eq!(
            redacted("émoji ✓ http://h/é?q=✓ done"),
            "émoji ✓ http://h/é done"
        );
    }
}
