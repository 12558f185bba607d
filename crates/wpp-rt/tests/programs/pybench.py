# A small interpreter benchmark for ferrite-wpp's tests: dictionaries,
# lists, objects, big integers and floating point (an n-body step), with a
# deterministic digest printed at the end. Failed and resumed, the digest
# must equal an uninterrupted run's.
import sys

def nbody(steps):
    bodies = [[float(i), float(i * 2), float(-i), 0.1 * i, 0.0, -0.1 * i, 1.0 + i] for i in range(5)]
    for _ in range(steps):
        for i, a in enumerate(bodies):
            for b in bodies[i + 1:]:
                dx, dy, dz = a[0] - b[0], a[1] - b[1], a[2] - b[2]
                d2 = dx * dx + dy * dy + dz * dz + 0.01
                mag = 0.001 / (d2 * d2 ** 0.5)
                a[3] -= dx * b[6] * mag; a[4] -= dy * b[6] * mag; a[5] -= dz * b[6] * mag
                b[3] += dx * a[6] * mag; b[4] += dy * a[6] * mag; b[5] += dz * a[6] * mag
        for a in bodies:
            a[0] += 0.01 * a[3]; a[1] += 0.01 * a[4]; a[2] += 0.01 * a[5]
    return sum(round(a[0] * 1e6) + round(a[1] * 1e6) for a in bodies)

class Node:
    __slots__ = ("k", "v", "next")
    def __init__(self, k, v, nxt):
        self.k, self.v, self.next = k, v, nxt

def structures(n):
    d, head = {}, None
    for i in range(n):
        k = (i * 2654435761) % 1000003
        d[k] = d.get(k, 0) + i
        head = Node(k, i, head)
        if i % 7 == 0:
            d.pop((k * 31) % 1000003, None)
    s, node = 0, head
    while node:
        s = (s * 31 + node.k + node.v) % (1 << 61)
        node = node.next
    return s ^ sum(d.values()) ^ len(d)

def bigints(n):
    f = 1
    for i in range(2, n):
        f *= i
    return f % 1000000007

rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 3
digest = 0
for r in range(rounds):
    digest = (digest * 1000003 + nbody(3000) + structures(60000) + bigints(3000)) % (1 << 61)
print("pybench", rounds, digest)
