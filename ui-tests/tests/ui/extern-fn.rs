use backstop::retry;

#[retry]
extern "C" fn fetch() -> Result<(), std::io::Error> {
    Ok(())
}

fn main() {}
