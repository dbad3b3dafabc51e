//! Fuzzes what the VMM checks before it hands a guest's queue to a
//! kernel vhost backend (`devices::virtio::vhost::vring_config`): the
//! backend reads the rings at VMM-virtual addresses, so every ring must
//! lie whole inside one RAM region. Any queue size, ready flag and ring
//! addresses, against guest memory with holes; checked against a
//! reference: accepted exactly when ready and each ring (descriptor table
//! 16n, avail 6+2n, used 6+8n bytes) is inside one region, and then the
//! configuration carries exactly the queue's values.
#![no_main]

use devices::virtio::vhost::vring_config;
use devices_fuzz::{is_ram, memory, Input, REGIONS};
use libfuzzer_sys::fuzz_target;
use virtio_queue::{Queue, QueueT};
use vm_memory::GuestAddress;

fn addr(inp: &mut Input) -> u64 {
    let r = inp.u8();
    match REGIONS.get(usize::from(r % 5)) {
        Some(&(a, l)) => {
            a.wrapping_add(u64::from(inp.u32()) % (l + 8192))
                .wrapping_sub(4096)
                & !0xf
        }
        None => inp.u64() & !0xf,
    }
}

fuzz_target!(|data: &[u8]| {
    let mut inp = Input(data);
    let mem = memory();
    let mut q = Queue::new(256).unwrap();
    let size = 1u16 << (inp.u8() % 9);
    let _ = q.try_set_size(size);
    let (d, a, u) = (addr(&mut inp), addr(&mut inp), addr(&mut inp));
    let _ = q.try_set_desc_table_address(GuestAddress(d));
    let _ = q.try_set_avail_ring_address(GuestAddress(a));
    let _ = q.try_set_used_ring_address(GuestAddress(u));
    let ready = inp.u8() & 1 == 1;
    q.set_ready(ready);
    let n = u64::from(q.size());
    let expect = ready
        && is_ram(q.desc_table(), 16 * n)
        && is_ram(q.avail_ring(), 6 + 2 * n)
        && is_ram(q.used_ring(), 6 + 8 * n);
    match vring_config(&mem, 0, &q) {
        Ok(c) => {
            assert!(
                expect,
                "accepted a ring outside one region: {d:#x} {a:#x} {u:#x} n={n}"
            );
            assert_eq!(c.queue_size, q.size());
            assert_eq!(
                (c.desc_table_addr, c.avail_ring_addr, c.used_ring_addr),
                (q.desc_table(), q.avail_ring(), q.used_ring())
            );
        }
        Err(e) => assert!(!expect, "refused a good ring: {e}"),
    }
});
