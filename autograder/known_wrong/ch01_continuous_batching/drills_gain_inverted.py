"""Inverted gain: gain = E[max_B L] / E[L] (static over continuous), not its inverse."""

REPLACE = {
    "drills": '''
drill_1 = 300
drill_2 = 1 / sum(1 / k for k in range(1, 9))
drill_3 = (0.9 * 50 + 0.1 * 1000) / (50 + (1000 - 50) * (1 - 0.9**32))
''',
}
FAILS = ["test_drills"]
MESSAGE = "not its inverse"
