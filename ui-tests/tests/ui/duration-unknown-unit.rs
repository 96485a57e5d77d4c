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

// A fraction of a day, in hours.
#[retry(deadline = 1.5d)]
fn every_day_and_a_half() -> Result<(), std::io::Error> {
    Ok(())
}

// More days than a `Duration` holds: no suggestion.
#[retry(deadline = 99999999999999999999d)]
fn forever() -> Result<(), std::io::Error> {
    Ok(())
}

fn main() {}
