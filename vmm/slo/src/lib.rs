//! zerostart slo: boot VMs repeatedly, time their boot phases the same way
//! for every VMM, and check boot-time SLOs.
//!
//! This crate has one purpose: turn "p95 of launch→init must stay under X
//! ms on this host" into a repeatable run with a machine-readable verdict.
//! A TOML config ([`config`]) names scenarios (VMM, kernel, initramfs,
//! memory, vCPUs, repetitions) and SLOs per phase; the runner ([`runner`])
//! boots each scenario, taking phases ([`phase`]) from zerostart's boot
//! timeline or, for other VMMs, from host-timestamped serial marker lines;
//! [`stats`] computes percentiles; [`report`] writes the terminal table,
//! `report.json` and JUnit XML; [`chart`] the PNG. Exit status 0 only when
//! every SLO holds.

#![deny(missing_docs)]

pub mod chart;
pub mod cli;
pub mod config;
pub mod phase;
pub mod report;
pub mod runner;
pub mod stats;
