"""A preempted sequence went to the back of waiting: waiting.append instead of appendleft."""

REPLACE = {
    "preempt": '''
def preempt(self, seq):
    seq.status = SequenceStatus.WAITING
    seq.is_prefill = True
    self.block_manager.deallocate(seq)
    self.waiting.append(seq)
''',
}
FAILS = ["test_preempt", "test_lesson_step2"]
MESSAGE = "Pitfall: a preempted sequence went to the back of waiting"
