"""The remote testbed: the paper's four nodes (server, gateway, delay, client) reached over
SSH with Fabric, e.g. a CloudLab ``copa-delay-gw`` experiment or a FABRIC slice.

- connection: :func:`connect` opens a Fabric connection whose host key is verified against
  known_hosts (paramiko ``RejectPolicy``) unless the inventory opts out
  (``insecure_host_keys: true``); errors name the host and the step. ``SshSetupError`` (wrong
  key, unknown host key, no sudo, missing interface, node not provisioned) is not retried;
  ``SshError`` (refused, timed out, connection dropped) is, by the trial's retry loop.
- runner: ``FabricRunner`` implements the Runner interface (testbed.runners) on one node: argv
  lists are quoted with ``shlex.join`` (never glued from strings), prefixed with ``sudo -n``
  when the login user is not root; ``start()`` launches a process detached (``setsid``) and
  returns its PID; ``stop()`` signals exactly that PID and fetches its files.
- node: facts about a node (programs, work directory, interfaces, offloads).
- lock: the slice lock held on the nodes while a trial or a clean uses them.
- testbed: ``SshTestbed``/``SshTopology``, the testbed interface (testbed.base) for one slice.
- state: the trial's state record and :func:`restore_nodes`, the one way changes are undone.
- clean: `latency-divide clean` for trials whose owner died.
- provision: packages and our tools on a node (rules/provision.smk).
- nodecheck: each real-time node's host check of itself, once per boot, before a trial.
"""
