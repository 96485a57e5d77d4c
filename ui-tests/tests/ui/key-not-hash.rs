use backstop::retry;

struct Shard {
    id: u32,
}

#[retry(key = shard)]
fn fetch(shard: &Shard) -> Result<u32, std::io::Error> {
    Ok(shard.id)
}

fn main() {}
