"""The testbed stage: where trials run. base (the Testbed and Slice interface, and what both
testbeds do the same way), factory (the one place a testbed kind becomes an implementation),
local and netns (namespaces on this host), ssh/ (four nodes over SSH), delay (netem or the
delay line), runners (argv lists run here or in a namespace), qsampler (the queue sampler,
standard library only), inventory (SSH testbeds described), clean (our local leftovers).
"""
