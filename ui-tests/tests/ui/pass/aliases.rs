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
    let _ = borrowed();
}

// Borrowed success types under an alias, and an error type that borrows:
// the error type is named without a lifetime it would need.
struct Store(String);

static POLICY: backstop::Policy = backstop::Policy::new();

impl Store {
    #[retry]
    async fn name(&self) -> std::io::Result<&str> {
        Ok(&self.0)
    }

    #[retry(policy = POLICY)]
    async fn name_under_policy(&self) -> std::io::Result<&str> {
        Ok(&self.0)
    }

    #[retry(when = |_: &std::borrow::Cow<'_, str>| false)]
    async fn cow(&self) -> Result<u8, std::borrow::Cow<'_, str>> {
        Ok(1)
    }
}

// The crate path as one keyword, which a `use` cannot name alone.
mod facade {
    pub use backstop::__private;

    #[backstop::retry(crate = self)]
    pub fn here() -> Result<u8, std::io::Error> {
        Ok(1)
    }

    pub mod inner {
        #[backstop::retry(crate = super)]
        pub fn above() -> Result<u8, std::io::Error> {
            Ok(1)
        }
    }
}

async fn borrowed() {
    let store = Store(String::from("a"));
    let _ = store.name().await;
    let _ = store.name_under_policy().await;
    let _ = store.cow().await;
    let _ = facade::here();
    let _ = facade::inner::above();
}
