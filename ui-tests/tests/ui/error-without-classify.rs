use backstop::retry;

#[derive(Debug)]
struct ApiError;

#[retry]
fn fetch() -> Result<(), ApiError> {
    Err(ApiError)
}

fn main() {}
