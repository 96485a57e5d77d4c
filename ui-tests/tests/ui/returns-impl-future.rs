use backstop::retry;

#[retry]
fn fetch() -> impl Future<Output = Result<u8, std::io::Error>> {
    async { Ok(1) }
}

fn main() {}
