use backstop::retry;

// A function that never returns has no failure to retry: said once, at `!`.
#[retry]
fn serve() -> ! {
    loop {}
}

fn main() {}
