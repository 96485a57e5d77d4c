//! Sending an HTTP request again when its body is a stream: keep what was
//! sent, up to a limit.

use std::collections::VecDeque;
use std::fmt;
use std::pin::Pin;
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context as TaskContext, Poll};
use std::time::Duration;

use bytes::{Buf, Bytes};
use http::HeaderMap;
use http_body::{Body, Frame, SizeHint};

use super::{Cloned, Replay};

/// Only the layer's own request kinds: the trait's methods are its
/// internals.
pub trait Sealed {}

impl Sealed for Cloned {}

impl Sealed for HttpBodies {}

/// `http::Request<B>` sent again whatever its body: a body of up to
/// `limit` bytes is kept and sent again; a longer one is streamed once (see
/// [`RetryLayer::http`](super::RetryLayer::http)).
///
/// ```
/// # extern crate backstop_runtime as backstop;
/// use backstop::tower::{HttpBodies, RetryLayer};
/// use backstop::Policy;
///
/// // The requests of `RetryLayer::http`: any `http::Request<B>`.
/// let layer = RetryLayer::http(&Policy::new());
/// let _: &RetryLayer<HttpBodies, _, _> = &layer;
/// ```
#[derive(Clone, Copy, Debug)]
pub struct HttpBodies {
    limit: usize,
    /// gRPC requests without a `grpc-timeout` get the time left as theirs.
    pub(crate) grpc_deadline: bool,
    /// The protection kept per destination is kept per method (path) too.
    pub(crate) per_method: bool,
}

impl HttpBodies {
    pub(crate) const fn new(limit: usize) -> Self {
        Self {
            limit,
            grpc_deadline: false,
            per_method: false,
        }
    }

    pub(crate) fn with_limit(self, limit: usize) -> Self {
        Self { limit, ..self }
    }
}

/// The body of a request sent through [`RetryLayer::http`](super::RetryLayer::http): the body kept
/// from the first attempt, or the original streamed (and kept as it goes,
/// up to the limit). Trailers are kept and sent again with it; a kept body
/// with trailers does not give its length as exact, so that an HTTP/1
/// client sends it chunked, trailers and all
/// (`a_bodys_trailers_reach_the_server_on_every_attempt`).
///
/// ```
/// # extern crate backstop_runtime as backstop;
/// use backstop::tower::ReplayBody;
/// use http_body::Body;
/// let body: ReplayBody<String> = ReplayBody::from_bytes("hello".into());
/// assert_eq!(body.size_hint().exact(), Some(5));
/// assert_eq!(format!("{body:?}"), r#"ReplayBody { kind: "kept" }"#);
/// ```
pub struct ReplayBody<B: Body> {
    kind: Kind<B>,
}

// The rarer kinds are boxed: a body is moved with its request, through
// every future and channel of the client below.
enum Kind<B: Body> {
    /// Every frame known, and no trailers: sent from memory.
    Kept(VecDeque<Bytes>),
    /// Every frame known, trailers too.
    Trailed(Box<Kept>),
    /// The original body, kept as it is read while it fits.
    Streamed(Box<Streamed<B>>),
    /// Reading the body failed before the first attempt: what was read,
    /// then the error.
    Broken(Box<Broken<B>>),
}

/// A body sent as it is read, kept as it goes while it fits.
struct Streamed<B: Body> {
    /// What was read of it before it was known not to fit.
    prefix: VecDeque<Bytes>,
    /// The body; handed back, with the prefix, if this one is dropped
    /// before it was read at all (a refused connection, a server that
    /// answered without reading it), so that it can still be sent.
    body: Option<Pin<Box<B>>>,
    kept: Arc<Mutex<Recording<B>>>,
    /// A frame was asked of the body.
    touched: bool,
}

/// A body whose reading failed: what was read, then the error.
struct Broken<B: Body> {
    prefix: VecDeque<Bytes>,
    error: Option<B::Error>,
}

/// A whole body, in memory.
#[derive(Clone, Debug, Default)]
struct Kept {
    chunks: VecDeque<Bytes>,
    // Boxed: most bodies have none, and a body is moved with its request.
    trailers: Option<Box<HeaderMap>>,
}

impl Kept {
    fn len(&self) -> usize {
        self.chunks.iter().map(Bytes::len).sum()
    }
}

impl<B: Body> Kind<B> {
    /// A body sent from memory, as `kept`.
    fn kept(kept: Kept) -> Self {
        if kept.trailers.is_some() {
            Self::Trailed(Box::new(kept))
        } else {
            Self::Kept(kept.chunks)
        }
    }
}

/// A streamed body as read so far.
struct Recording<B> {
    limit: usize,
    kept: Kept,
    len: usize,
    /// It did not fit: nothing is kept.
    over: bool,
    /// It was read to its end: what comes after is ignored.
    ended: bool,
    /// The body, handed back unread.
    unsent: Option<(VecDeque<Bytes>, Pin<Box<B>>)>,
}

impl<B> Recording<B> {
    fn new(limit: usize, prefix: &VecDeque<Bytes>) -> Self {
        let mut recording = Self {
            limit,
            kept: Kept::default(),
            len: 0,
            over: false,
            ended: false,
            unsent: None,
        };
        for chunk in prefix {
            recording.data(chunk);
        }
        recording
    }

    fn data(&mut self, chunk: &Bytes) {
        if self.over || self.ended {
            return;
        }
        self.len = self.len.saturating_add(chunk.len());
        if self.len > self.limit {
            self.over = true;
            self.kept = Kept::default();
        } else {
            self.kept.chunks.push_back(chunk.clone());
        }
    }

    /// The whole body, if it was read to its end and fit.
    fn whole(&self) -> Option<Kept> {
        (self.ended && !self.over).then(|| self.kept.clone())
    }
}

fn lock<B>(recording: &Mutex<Recording<B>>) -> std::sync::MutexGuard<'_, Recording<B>> {
    // A panic while recording leaves at worst a partial record, which
    // `ended` (set last) keeps from being replayed.
    recording.lock().unwrap_or_else(PoisonError::into_inner)
}

impl<B: Body> ReplayBody<B> {
    /// A body sent from memory.
    ///
    /// ```
    /// # extern crate backstop_runtime as backstop;
    /// use backstop::tower::ReplayBody;
    /// use http_body::Body;
    /// let body: ReplayBody<String> = ReplayBody::from_bytes(bytes::Bytes::from_static(b"{}"));
    /// assert_eq!(body.size_hint().exact(), Some(2));
    /// ```
    pub fn from_bytes(bytes: Bytes) -> Self {
        let mut chunks = VecDeque::new();
        if !bytes.is_empty() {
            chunks.push_back(bytes);
        }
        Self {
            kind: Kind::Kept(chunks),
        }
    }
}

// The body is boxed, never pinned in place: moving a `ReplayBody` moves
// only the box.
impl<B: Body> Unpin for ReplayBody<B> {}

impl<B: Body> Drop for ReplayBody<B> {
    fn drop(&mut self) {
        if let Kind::Streamed(streamed) = &mut self.kind
            && !streamed.touched
            && let Some(body) = streamed.body.take()
        {
            lock(&streamed.kept).unsent = Some((std::mem::take(&mut streamed.prefix), body));
        }
    }
}

impl<B: Body> fmt::Debug for ReplayBody<B> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let kind = match &self.kind {
            Kind::Kept(_) | Kind::Trailed(_) => "kept",
            Kind::Streamed(_) => "streamed",
            Kind::Broken(_) => "broken",
        };
        f.debug_struct("ReplayBody").field("kind", &kind).finish()
    }
}

impl<B> Body for ReplayBody<B>
where
    B: Body,
    B::Data: Buf,
{
    type Data = Bytes;
    type Error = B::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut TaskContext<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, B::Error>>> {
        match &mut self.get_mut().kind {
            Kind::Kept(chunks) => {
                Poll::Ready(chunks.pop_front().map(|chunk| Ok(Frame::data(chunk))))
            }
            Kind::Trailed(kept) => Poll::Ready(
                kept.chunks
                    .pop_front()
                    .map(Frame::data)
                    .or_else(|| {
                        kept.trailers
                            .take()
                            .map(|trailers| Frame::trailers(*trailers))
                    })
                    .map(Ok),
            ),
            Kind::Broken(broken) => Poll::Ready(
                broken
                    .prefix
                    .pop_front()
                    .map(|chunk| Ok(Frame::data(chunk)))
                    .or_else(|| broken.error.take().map(Err)),
            ),
            Kind::Streamed(streamed) => {
                let Streamed {
                    prefix,
                    body,
                    kept,
                    touched,
                } = &mut **streamed;
                *touched = true;
                if let Some(chunk) = prefix.pop_front() {
                    return Poll::Ready(Some(Ok(Frame::data(chunk))));
                }
                let Some(body) = body else {
                    return Poll::Ready(None);
                };
                let frame = match body.as_mut().poll_frame(cx) {
                    Poll::Pending => return Poll::Pending,
                    Poll::Ready(None) => {
                        lock(kept).ended = true;
                        return Poll::Ready(None);
                    }
                    Poll::Ready(Some(Err(error))) => return Poll::Ready(Some(Err(error))),
                    Poll::Ready(Some(Ok(frame))) => {
                        frame.map_data(|mut data| data.copy_to_bytes(data.remaining()))
                    }
                };
                let mut recording = lock(kept);
                if let Some(chunk) = frame.data_ref() {
                    recording.data(chunk);
                } else if let Some(trailers) = frame.trailers_ref()
                    && !recording.ended
                {
                    recording.kept.trailers = Some(Box::new(trailers.clone()));
                    // Trailers are a body's last frame: a client (hyper's)
                    // asks for nothing after them.
                    recording.ended = true;
                }
                if body.is_end_stream() {
                    recording.ended = true;
                }
                Poll::Ready(Some(Ok(frame)))
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        match &self.kind {
            Kind::Kept(chunks) => chunks.is_empty(),
            Kind::Trailed(kept) => kept.chunks.is_empty() && kept.trailers.is_none(),
            Kind::Broken(broken) => broken.prefix.is_empty() && broken.error.is_none(),
            Kind::Streamed(streamed) => {
                let end = streamed.prefix.is_empty()
                    && streamed.body.as_ref().is_none_or(Body::is_end_stream);
                if end {
                    lock(&streamed.kept).ended = true;
                }
                end
            }
        }
    }

    fn size_hint(&self) -> SizeHint {
        match &self.kind {
            Kind::Kept(chunks) => {
                SizeHint::with_exact(chunks.iter().map(|chunk| chunk.len() as u64).sum())
            }
            // Not exact: an HTTP/1 client sends a body of known length with
            // `content-length`, and its trailers could not go.
            Kind::Trailed(kept) => {
                let mut hint = SizeHint::new();
                hint.set_lower(kept.len() as u64);
                hint
            }
            Kind::Broken(_) => SizeHint::default(),
            Kind::Streamed(streamed) => {
                let before: u64 = streamed.prefix.iter().map(|chunk| chunk.len() as u64).sum();
                let rest = streamed
                    .body
                    .as_ref()
                    .map_or_else(|| SizeHint::with_exact(0), Body::size_hint);
                let mut hint = SizeHint::new();
                hint.set_lower(rest.lower().saturating_add(before));
                if let Some(upper) = rest.upper() {
                    hint.set_upper(upper.saturating_add(before));
                }
                hint
            }
        }
    }
}

/// What a call through [`RetryLayer::http`](super::RetryLayer::http)
/// keeps of its request.
pub struct HttpSource<B: Body> {
    parts: http::request::Parts,
    limit: usize,
    grpc_deadline: bool,
    per_method: bool,
    /// How long the next attempt may run, if it is cut off
    /// ([`AttemptLimit`]: in the padding after the flags above, so that
    /// a call's future does not grow).
    attempt_limit: AttemptLimit,
    body: BodyState<B>,
    /// The first attempt's body, read by [`Replay::poll_prepare`] when it did
    /// not turn out whole.
    pending: Option<Kind<B>>,
}

enum BodyState<B: Body> {
    /// Not sent yet.
    Unsent(B),
    /// Being read whole before its first attempt (it said it fits): what
    /// was read so far.
    Reading(Pin<Box<B>>, Kept, usize),
    /// Kept whole.
    Kept(Kept),
    /// Streamed, kept as it was read while it fit.
    Streamed(Arc<Mutex<Recording<B>>>),
    /// Streamed, and handed back unread: sent as it is next time.
    Returned(VecDeque<Bytes>, Pin<Box<B>>),
    /// Reading it failed: cannot be sent again.
    Broken,
}

impl<B: Body> fmt::Debug for HttpSource<B> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HttpSource")
            .field("method", &self.parts.method)
            .field("uri", &self.parts.uri)
            .finish_non_exhaustive()
    }
}

impl<B> Replay<http::Request<B>> for HttpBodies
where
    B: Body + Send + 'static,
    B::Data: Buf + Send,
    B::Error: Send,
{
    type Request = http::Request<ReplayBody<B>>;
    type Source = HttpSource<B>;
    const IS_HTTP: bool = true;

    fn source(&self, request: http::Request<B>) -> HttpSource<B> {
        let (parts, body) = request.into_parts();
        HttpSource {
            parts,
            limit: self.limit,
            grpc_deadline: self.grpc_deadline,
            per_method: self.per_method,
            attempt_limit: AttemptLimit::NONE,
            body: BodyState::Unsent(body),
            pending: None,
        }
    }

    fn idempotent(source: &HttpSource<B>) -> bool {
        crate::classify::http::is_idempotent_parts(&source.parts.method, &source.parts.headers)
    }

    fn destination(source: &HttpSource<B>, given: Option<u64>) -> Option<(u64, bool)> {
        let uri = &source.parts.uri;
        let scheme = uri.scheme_str();
        let destination = match uri.authority() {
            _ if given.is_some() => given,
            Some(authority) => Some(crate::classify::http::recent_destination(
                scheme,
                authority.as_str(),
                || {
                    crate::classify::http::destination(
                        scheme,
                        authority.host(),
                        authority.port_u16(),
                    )
                },
            )),
            // A URI without a host (a path, as a gRPC client sends below
            // its channel): the `Host` header's, else none.
            None => source
                .parts
                .headers
                .get(http::header::HOST)
                .and_then(|host| host.to_str().ok())
                .map(|host| crate::classify::http::destination(scheme, host, None)),
        };
        if !source.per_method {
            return destination.map(|d| (d, false));
        }
        // Per method too: the path (a gRPC method's `/package.Service/Method`)
        // with the destination; the path alone, which only the layer can
        // tell apart from another layer's, without one.
        let path = crate::limit::keyed::key_hash(uri.path());
        let (key, path_only) = match destination {
            Some(d) => (d.rotate_left(29) ^ path, false),
            None => (path, true),
        };
        // Named for `tracing` and `metrics` as the destination and path
        // (unnamed if the destination has no name: it is `(other)`).
        let destination_name = match destination {
            Some(d) => crate::limit::names::named(crate::limit::names::word(d)),
            None => Some(""),
        };
        if let Some(destination_name) = destination_name {
            crate::limit::names::name(key, || format!("{destination_name}{}", uri.path()));
        }
        Some((key, path_only))
    }

    fn poll_next(
        source: &mut HttpSource<B>,
        cx: &mut TaskContext<'_>,
    ) -> Poll<http::Request<ReplayBody<B>>> {
        if let Some(kind) = source.pending.take() {
            return Poll::Ready(request(source, kind));
        }
        let kind = match std::mem::replace(&mut source.body, BodyState::Broken) {
            state @ (BodyState::Unsent(_) | BodyState::Reading(..)) => {
                source.body = state;
                let Poll::Ready(kind) = poll_first(source, cx, false) else {
                    return Poll::Pending;
                };
                kind
            }
            BodyState::Returned(prefix, body) => {
                let (kind, state) = streamed(prefix, body, source.limit);
                source.body = state;
                kind
            }
            BodyState::Kept(kept) => {
                source.body = BodyState::Kept(kept.clone());
                Kind::kept(kept)
            }
            BodyState::Streamed(_) | BodyState::Broken => {
                // `settle` leaves only the states above when it says the
                // request can be sent again, and the decider asks for
                // another attempt only then.
                unreachable!("the decider retries only a request that can be sent again")
            }
        };
        Poll::Ready(request(source, kind))
    }

    fn settle(source: &mut HttpSource<B>) -> bool {
        let settled = match std::mem::replace(&mut source.body, BodyState::Broken) {
            // Cut off while it was read: what was read is gone with
            // the attempt.
            BodyState::Reading(..) => BodyState::Broken,
            BodyState::Streamed(recording) => {
                let mut recording = lock(&recording);
                if let Some(kept) = recording.whole() {
                    BodyState::Kept(kept)
                } else if let Some((prefix, body)) = recording.unsent.take() {
                    BodyState::Returned(prefix, body)
                } else {
                    BodyState::Broken
                }
            }
            other => other,
        };
        source.body = settled;
        !matches!(source.body, BodyState::Broken)
    }

    type Copy = Copied;

    fn poll_prepare(source: &mut HttpSource<B>, cx: &mut TaskContext<'_>) -> Poll<bool> {
        if matches!(source.body, BodyState::Unsent(_) | BodyState::Reading(..)) {
            let Poll::Ready(kind) = poll_first(source, cx, true) else {
                return Poll::Pending;
            };
            if !matches!(source.body, BodyState::Kept(_)) {
                // Streamed, or broken: the first attempt sends it as it is.
                source.pending = Some(kind);
            }
        }
        Poll::Ready(matches!(source.body, BodyState::Kept(_)))
    }

    fn copy(source: &HttpSource<B>) -> Option<Self::Copy> {
        match &source.body {
            BodyState::Kept(kept) if source.pending.is_none() => Some(Copied {
                parts: source.parts.clone(),
                grpc_deadline: source.grpc_deadline,
                attempt_limit: source.attempt_limit,
                kept: kept.clone(),
            }),
            _ => None,
        }
    }

    fn limit(source: &mut HttpSource<B>, limit: Option<Duration>) {
        source.attempt_limit = AttemptLimit::of(limit);
    }

    fn from_copy(copy: Copied) -> http::Request<ReplayBody<B>> {
        let Copied {
            mut parts,
            grpc_deadline,
            attempt_limit,
            kept,
        } = copy;
        grpc_timeout(&mut parts.headers, grpc_deadline, attempt_limit.get());
        http::Request::from_parts(
            parts,
            ReplayBody {
                kind: Kind::kept(kept),
            },
        )
    }
}

/// How long an attempt may run, if it is cut off, in whole microseconds
/// (a `grpc-timeout`'s finest unit): 4 bytes. A limit past `u32::MAX`
/// microseconds (71 minutes) is read as none: the deadline's time left
/// is sent then, if there is one.
#[derive(Clone, Copy, Debug)]
struct AttemptLimit(u32);

impl AttemptLimit {
    const NONE: Self = Self(u32::MAX);

    fn of(limit: Option<Duration>) -> Self {
        limit.map_or(Self::NONE, |limit| {
            Self(u32::try_from(limit.as_micros()).unwrap_or(u32::MAX))
        })
    }

    fn get(self) -> Option<Duration> {
        (self.0 != u32::MAX).then(|| Duration::from_micros(u64::from(self.0)))
    }
}

/// A copy of an HTTP request whose body is kept whole, for a hedge.
#[derive(Debug)]
pub struct Copied {
    parts: http::request::Parts,
    grpc_deadline: bool,
    attempt_limit: AttemptLimit,
    kept: Kept,
}

/// The request of an attempt: the call's head, its `grpc-timeout` the
/// time left, and `kind` as its body.
fn request<B: Body>(source: &HttpSource<B>, kind: Kind<B>) -> http::Request<ReplayBody<B>> {
    let mut parts = source.parts.clone();
    grpc_timeout(
        &mut parts.headers,
        source.grpc_deadline,
        source.attempt_limit.get(),
    );
    http::Request::from_parts(parts, ReplayBody { kind })
}

/// A gRPC request's `grpc-timeout` becomes the time left before the
/// call's deadline, or the attempt's own `limit` (an attempt timeout's,
/// within the deadline), if that is sooner: the server then stops working
/// on an attempt whose answer nobody would wait for. A request without
/// one gets one only if `add` (the layer serves unary calls only: a
/// stream would be cut off at the deadline).
fn grpc_timeout(headers: &mut http::HeaderMap, add: bool, limit: Option<Duration>) {
    let is_grpc = headers
        .get(http::header::CONTENT_TYPE)
        .and_then(|value| value.to_str().ok())
        .is_some_and(|value| value.starts_with("application/grpc"));
    // (Asked first: most requests are not gRPC, and the time left is a
    // clock read.)
    if !is_grpc {
        return;
    }
    // The sooner of the two, if either.
    let Some(left) = [crate::run::scope::time_left(), limit]
        .into_iter()
        .flatten()
        .min()
    else {
        return;
    };
    let own = headers
        .get(&crate::classify::http::GRPC_TIMEOUT)
        .and_then(|value| value.to_str().ok())
        .and_then(crate::classify::http::parse_grpc_timeout);
    if own.map_or(!add, |own| own <= left) {
        return;
    }
    if let Ok(value) = http::HeaderValue::try_from(crate::classify::http::format_grpc_timeout(left))
    {
        headers.insert(crate::classify::http::GRPC_TIMEOUT, value);
    }
}

/// The first attempt's body, from `source.body` (`Unsent`, or `Reading`
/// it), leaving there what becomes of it. One that says it fits is read
/// whole first (a server may answer before reading it, and it must still
/// be there to send again); any other is streamed, and kept as it goes
/// while it fits. A read cut off midway stays `Reading`, which `settle`
/// takes for broken.
///
/// Before a hedged call (`eager`), a body that does not say its length (a
/// stream: tonic's, an encoder's) is read first as far as it is already
/// there: whole and within the limit, it is kept, and copies of it can be
/// sent. Its next chunk is not waited for (a stream may be waiting for the
/// answer): if one is not there yet, what was read goes first and the rest
/// is streamed.
fn poll_first<B>(source: &mut HttpSource<B>, cx: &mut TaskContext<'_>, eager: bool) -> Poll<Kind<B>>
where
    B: Body,
    B::Data: Buf,
{
    let limit = source.limit;
    let (mut body, mut kept, mut len, wait) =
        match std::mem::replace(&mut source.body, BodyState::Broken) {
            // Nothing to read (a `GET`'s): kept as it is, nothing boxed.
            BodyState::Unsent(body) if body.is_end_stream() => {
                source.body = BodyState::Kept(Kept::default());
                return Poll::Ready(Kind::Kept(VecDeque::new()));
            }
            BodyState::Unsent(body) => {
                let fits = body
                    .size_hint()
                    .upper()
                    .is_some_and(|upper| upper <= limit as u64);
                let body = Box::pin(body);
                if !fits && !eager {
                    let (kind, state) = streamed(VecDeque::new(), body, limit);
                    source.body = state;
                    return Poll::Ready(kind);
                }
                (body, Kept::default(), 0usize, fits)
            }
            BodyState::Reading(body, kept, len) => (body, kept, len, true),
            _ => unreachable!("only an unsent body is read first"),
        };
    loop {
        if body.is_end_stream() {
            source.body = BodyState::Kept(kept.clone());
            return Poll::Ready(Kind::kept(kept));
        }
        let frame = match body.as_mut().poll_frame(cx) {
            Poll::Pending if wait => {
                source.body = BodyState::Reading(body, kept, len);
                return Poll::Pending;
            }
            Poll::Pending => {
                let (kind, state) = streamed(std::mem::take(&mut kept.chunks), body, limit);
                source.body = state;
                return Poll::Ready(kind);
            }
            Poll::Ready(None) => {
                source.body = BodyState::Kept(kept.clone());
                return Poll::Ready(Kind::kept(kept));
            }
            Poll::Ready(Some(Err(error))) => {
                return Poll::Ready(Kind::Broken(Box::new(Broken {
                    prefix: kept.chunks,
                    error: Some(error),
                })));
            }
            Poll::Ready(Some(Ok(frame))) => frame,
        };
        let frame = frame.map_data(|mut data| data.copy_to_bytes(data.remaining()));
        match frame.into_data() {
            Ok(chunk) => {
                len = len.saturating_add(chunk.len());
                kept.chunks.push_back(chunk);
            }
            Err(frame) => {
                if let Ok(trailers) = frame.into_trailers() {
                    // A body's last frame: it is whole.
                    kept.trailers = Some(Box::new(trailers));
                    source.body = BodyState::Kept(kept.clone());
                    return Poll::Ready(Kind::kept(kept));
                }
            }
        }
        if len > limit {
            // Its size hint was wrong: stream the rest.
            let (kind, state) = streamed(std::mem::take(&mut kept.chunks), body, limit);
            source.body = state;
            return Poll::Ready(kind);
        }
    }
}

/// A body streamed after `prefix`, kept as it goes while it fits.
fn streamed<B: Body>(
    prefix: VecDeque<Bytes>,
    body: Pin<Box<B>>,
    limit: usize,
) -> (Kind<B>, BodyState<B>) {
    let recording = Arc::new(Mutex::new(Recording::new(limit, &prefix)));
    let kind = Kind::Streamed(Box::new(Streamed {
        prefix,
        body: Some(body),
        kept: recording.clone(),
        touched: false,
    }));
    (kind, BodyState::Streamed(recording))
}
