//! PCI Bus Master Enable: with BME = 0 the controller fetches no SQE, moves no data, posts
//! no CQE and raises no interrupt; BME = 1 resumes the queued work.

mod common;

use common::{pattern, ready_host};
use hmb_nvme::fake_host::Command;
use hmb_nvme::ControllerConfig;

#[test]
fn no_dma_while_bus_master_is_off_and_the_work_resumes_after() {
    let mut h = ready_host(ControllerConfig::default());
    let data = pattern(4096, 21);
    let buf = h.alloc(4096);
    h.guest_write(buf, &data);
    let irqs = h.irq.count(1);
    h.ctrl.set_bus_master(false);
    assert!(!h.ctrl.report().bus_master);
    let cid = h.push(1, Command::new(0x01).nsid(1).prp1(buf).cdw(10, 64).cdw(12, 7));
    h.ring(1);
    assert!(h.reap(1).is_none(), "no CQE with BME = 0");
    assert_eq!(h.irq.count(1), irqs, "no interrupt with BME = 0");
    let r = h.ctrl.report();
    assert_eq!(r.counters.writes, 0, "no data moved");
    assert_eq!(r.counters.io_commands, 0, "no SQE fetched");
    assert_eq!(r.counters.bus_master_stalls, 1);
    // The host changes its buffer meanwhile: the write must take what is there at fetch.
    let newer = pattern(4096, 22);
    h.guest_write(buf, &newer);
    h.ctrl.set_bus_master(true);
    let c = h.reap(1).expect("the held write completes once BME = 1");
    assert!(c.ok());
    assert_eq!(c.cid, cid);
    assert_eq!(h.irq.count(1), irqs + 1);
    let (_, back) = h.read_lbas(1, 64, 8, 9);
    assert_eq!(back, newer);
}
