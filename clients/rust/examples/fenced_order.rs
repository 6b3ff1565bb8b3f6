//! Pay an order under a lock: acquire with a watchdog, check the lock before each step,
//! send the fence with every write, release and learn whether the lock held throughout.
//!
//! Start a server with the module (`make run`, port 7379), then:
//!
//! ```sh
//! cargo run -p redis-lock-client --example fenced_order            # redis://127.0.0.1:7379/
//! cargo run -p redis-lock-client --example fenced_order -- redis://127.0.0.1:7000/
//! ```

use std::collections::HashMap;
use std::time::Duration;

use redis_lock_client::{LockOptions, Locker};

/// The protected resource: refuses a write whose fence is older than one it has seen,
/// so a holder whose lock expired behind its back cannot overwrite a newer holder.
#[derive(Default)]
struct Orders {
    highest_fence: HashMap<String, u64>,
    state: HashMap<String, String>,
}

impl Orders {
    fn write(&mut self, order: &str, fence: u64, state: &str) -> Result<(), String> {
        let highest = self.highest_fence.entry(order.to_string()).or_default();
        if fence < *highest {
            return Err(format!("stale fence {fence} for {order} (seen {highest})"));
        }
        *highest = fence;
        self.state.insert(order.to_string(), state.to_string());
        Ok(())
    }
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let url = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "redis://127.0.0.1:7379/".to_string());
    let locker = Locker::open(&url)?;
    let mut orders = Orders::default();

    // Wait up to 5 s for the order; keep the lock alive for as long as the work takes.
    let options = LockOptions::new(Duration::from_secs(3))
        .wait(Duration::from_secs(5))
        .watchdog();
    let Some(lock) = locker.acquire("lock:order:42", &options)? else {
        println!("order 42 is busy, try later");
        return Ok(());
    };
    println!("locked order 42 with fence {}", lock.fence());

    for step in ["reserved", "charged", "paid"] {
        // Stop at once if the watchdog found the lock gone.
        lock.check()?;
        std::thread::sleep(Duration::from_millis(400));
        orders.write("order:42", lock.fence(), step)?;
        println!("order 42: {step}");
    }

    if lock.release()? {
        println!("released; the lock was held throughout");
    } else {
        println!("the lock was lost before release: check the order's state");
    }
    Ok(())
}
