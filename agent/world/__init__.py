"""Recorded worlds: the stand-in Kubernetes API and the objects of recorded incidents (the demo's
and the evaluation's), served where a real cluster cannot run."""
