use backstop::retry;

// A `&mut` inside an argument's type gives one attempt unique access too:
// in a tuple, and in a generic type.
#[retry(hedge = 50ms, idempotent)]
async fn tally((total, step): (&mut u32, u32), last: Option<&mut u32>) -> Result<u32, std::io::Error> {
    *total += step;
    if let Some(last) = last {
        *last = step;
    }
    Ok(*total)
}

fn main() {}
