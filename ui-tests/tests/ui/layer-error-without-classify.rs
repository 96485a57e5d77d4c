// A layer over a service whose error type says nothing of retrying.
use backstop::tower::RetryLayer;
use backstop::Policy;
use tower::{Layer, ServiceExt};

#[derive(Debug)]
struct ConnError;

fn main() {
    let inner = tower::service_fn(|request: u32| async move {
        if request == 0 { Err(ConnError) } else { Ok(request) }
    });
    let service = RetryLayer::new(&Policy::new()).layer(inner);
    let _ = service.oneshot(7);
}
