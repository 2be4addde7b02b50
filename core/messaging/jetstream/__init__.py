"""The event bus on NATS JetStream: a durable, replicated log behind the outbox.

Layout: one stream per topic, ``{prefix}_{topic}`` (dots as ``_``), on subject
``{prefix}.{topic}``, in file storage with the replicas and retention the settings name; on each
stream one durable pull consumer per opsgate consumer of the topic, named after it.

The relay publishes each row with ``Nats-Msg-Id`` ``{row id}.{publication}``: JetStream's
duplicate window drops the relay's own retry of a claim (the same publication), while a resend on
purpose (the delivery watchdog, a requeued dead letter: the next publication) goes through.
``publish`` returns once the server acknowledged every message, so a row is marked published only
then (the relay commits its marks after ``publish``; a failure rolls them back).

A reader acknowledges a message after the consumer runner recorded it in the inbox (done,
duplicate, dead or held). While the runner works, the reader says "in progress" every third of
AckWait, so a long step is not delivered again; a frozen or killed process's message is, after
AckWait, to another reader of the same durable consumer, and the inbox makes that harmless. The
server delivers a message at most MaxDeliver times, waiting longer each time (doubling from
AckWait); the last delivery is buried as a dead letter (``opsgate outbox dead``) without being
handled again, so a message that kills its consumer never blocks the other cases.

A server that comes back without its store (a lost volume) is set up again by the processes
that meet it, none restarted by hand: the relay creates a lost stream (with its durable
consumers) before publishing again, and a reader whose durable consumer is gone creates it again
with the same settings; what the server lost, the relay's delivery watchdog sends again.

nats-py is asyncio and opsgate's workers are threads: the bus runs one event loop on a thread of
its own, and its methods wait there for their coroutines.

Modules: ``config`` (names, stream and consumer settings, the setup error), ``bus`` (the
connection and its loop thread: every operation runs there), ``setup`` (creating and checking
streams and durable consumers), ``wire`` (a message's id header and JSON body), ``publisher``
(publishing a batch and waiting for every acknowledgement), ``reader`` (the pull consumer feeding
a consumer runner), ``figures`` (the per-consumer figures ``/readyz`` shows).
"""
