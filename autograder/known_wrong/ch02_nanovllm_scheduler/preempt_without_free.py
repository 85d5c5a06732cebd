"""Preempt did not free the sequence's blocks: deallocate is missing."""

REPLACE = {
    "preempt": '''
def preempt(self, seq):
    seq.status = SequenceStatus.WAITING
    seq.is_prefill = True
    self.waiting.appendleft(seq)
''',
}
FAILS = ["test_preempt", "test_lesson_step2"]
MESSAGE = "Pitfall: preempt did not free the sequence's blocks"
