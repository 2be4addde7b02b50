"""The Slack front end: Bolt listeners, the thread's posts and card, and the local Slack sandbox;
it talks to the core only through the case service and the gateway."""
