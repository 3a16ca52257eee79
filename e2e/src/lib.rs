//! Test helpers for a real API server: to be written (issue 5).
