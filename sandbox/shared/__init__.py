"""Pure code both sides of the trust boundary import: the parent (the rest of sandbox/) and the candidate's processes
(sandbox/child/). A room of its own rather than part of sandbox/protocol.py, which is the wire format alone: these are
the figures and functions both sides must compute alike (how outputs are compared and fingerprinted, the timing
scheme's lead, a gradient's projection, the kernel trace's format, the PCH layout, a compile log's reading, the kernel
languages). Nothing here holds state or imports from sandbox/ beyond this room and sandbox.protocol."""
