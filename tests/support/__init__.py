"""Test support: real server processes on free loopback ports."""
