"""Conformance traces of the protocol machine (tests/vectors/protocol/, documented in
tests/vectors/README.md "Protocol traces"): ``replica`` (the hashing replica traces steer),
``jsonform`` (events and effects as JSON), ``script`` (driving one machine while playing the
rest of the group), ``scenarios`` (one function per trace), ``replay`` (what every
implementation does with a trace). ``python tests/vectorgen --write protocol`` regenerates the
files; ``--check`` replays them."""
