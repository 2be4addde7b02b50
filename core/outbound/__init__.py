"""Outbound HTTP shared by step adapters and evidence reads: URL allow-lists and one client
that follows redirects only within them."""
