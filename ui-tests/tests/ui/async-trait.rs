use async_trait::async_trait;
use backstop::retry;

#[async_trait]
trait Users {
    async fn get(&self, id: u64) -> Result<String, std::io::Error>;
}

struct Client;

#[async_trait]
impl Users for Client {
    #[retry]
    async fn get(&self, id: u64) -> Result<String, std::io::Error> {
        Ok(format!("user {id}"))
    }
}

fn main() {}
