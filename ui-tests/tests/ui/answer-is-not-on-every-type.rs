// What a layer tells of a call in its response is implemented by the kind
// of requests (`Cloned`, `HttpBodies`), not by every type: the docs of a
// crate built with backstop list no impl of it on the crate's own types.
use backstop::tower::{Answer, Cloned};

struct Item;

fn answers<A: Answer<Cloned>>() {}

fn main() {
    answers::<Item>();
}
