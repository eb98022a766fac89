"""What the server observes about itself: counters, the slow log, latency events."""
