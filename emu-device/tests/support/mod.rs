pub mod qtest;
