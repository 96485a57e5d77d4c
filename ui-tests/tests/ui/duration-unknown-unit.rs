use backstop::retry;

#[retry(deadline = 10secs)]
fn fetch() -> Result<(), std::io::Error> {
    Ok(())
}

// Days are not a unit: in hours.
#[retry(deadline = 2d)]
fn sync_daily() -> Result<(), std::io::Error> {
    Ok(())
}

fn main() {}
