use backstop::retry;

// backon's builder names, as a user coming from it writes them.
#[retry(max_times = 3)]
fn retries() -> Result<(), std::io::Error> {
    Ok(())
}

#[retry(total_delay = 10s)]
fn total() -> Result<(), std::io::Error> {
    Ok(())
}

#[retry(notify = |_| {})]
fn notified() -> Result<(), std::io::Error> {
    Ok(())
}

#[retry(adjust = |_| None)]
fn adjusted() -> Result<(), std::io::Error> {
    Ok(())
}

fn main() {}
