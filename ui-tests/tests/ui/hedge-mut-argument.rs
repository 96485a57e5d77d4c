use backstop::retry;

struct Conn;

impl Conn {
    #[retry(hedge = 50ms, idempotent)]
    async fn query(&mut self, rows: &mut Vec<u32>, mut limit: usize) -> Result<u32, std::io::Error> {
        limit -= 1;
        rows.push(limit as u32);
        Ok(1)
    }

    // The same written other ways: a typed receiver, a `mut` inside a
    // pattern.
    #[retry(hedge = 50ms, idempotent)]
    async fn count(self: &mut Self, (mut seen, limit): (u32, u32)) -> Result<u32, std::io::Error> {
        seen += limit;
        Ok(seen)
    }
}

fn main() {}
