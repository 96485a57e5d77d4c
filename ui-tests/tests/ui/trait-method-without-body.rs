use backstop::retry;

trait Client {
    #[retry]
    fn fetch(&self) -> Result<(), std::io::Error>;
}

fn main() {}
