//! Return types that are `Result`s under other names.
use backstop::retry;

#[derive(Debug)]
struct MyErr;

impl backstop::Classify for MyErr {
    fn classify(&self) -> backstop::Verdict {
        backstop::Verdict::Retry
    }
}

// Parameters in another order than `Result`'s.
type Flip<E, T> = Result<T, E>;

#[retry]
fn flip() -> Flip<MyErr, u8> {
    Ok(1)
}

// A second parameter that is not the error type.
#[derive(Debug)]
struct ApiError<C>(C);

impl<C> backstop::Classify for ApiError<C> {
    fn classify(&self) -> backstop::Verdict {
        backstop::Verdict::Stop
    }
}

type ApiResult<T, C = ()> = Result<T, ApiError<C>>;

struct Ctx;

#[retry]
fn with_context() -> ApiResult<u8, Ctx> {
    Ok(1)
}

// A const parameter.
type Arr<T, const N: usize> = Result<[T; N], MyErr>;

#[retry]
fn array<const N: usize>() -> Arr<u8, N> {
    Ok([0; N])
}

fn main() {
    let _ = flip();
    let _ = with_context();
    let _ = array::<3>();
}
