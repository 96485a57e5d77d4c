use backstop::retry;

// A value passed through a `macro_rules!` fragment is checked as if
// written out.
macro_rules! fetcher {
    ($attempts:literal, $base:literal) => {
        #[retry(attempts = $attempts, base = $base)]
        fn fetch() -> Result<(), std::io::Error> {
            Ok(())
        }
    };
}

fetcher!(0, 10ms);

fn main() {}
