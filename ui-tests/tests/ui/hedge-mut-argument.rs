use backstop::retry;

struct Conn;

impl Conn {
    #[retry(hedge = 50ms, idempotent)]
    async fn query(&mut self, rows: &mut Vec<u32>, mut limit: usize) -> Result<u32, std::io::Error> {
        limit -= 1;
        rows.push(limit as u32);
        Ok(1)
    }
}

fn main() {}
