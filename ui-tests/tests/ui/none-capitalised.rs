use backstop::retry;

#[retry(deadline = None, budget = None)]
fn fetch() -> Result<(), std::io::Error> {
    Ok(())
}



#[retry(budget = Option::None)]
fn fetch_again() -> Result<(), std::io::Error> {
    Ok(())
}
fn main() {}
