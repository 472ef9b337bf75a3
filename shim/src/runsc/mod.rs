pub mod command;
pub mod features;
