"""A pipeline's controller threads, one per stage, from Python (the C++ is
examples/train/stage_threads.h and GptPipeline's run_stage_threads): run(jobs) runs each job on
a thread of its own and raises the first exception a job raised once every job has ended; the
stages hand each other their activations and gradients through a Mailbox, whose take() waits up
to a deadline and names the stage that did not send.

    mail = Mailbox()
    run([lambda: stage_0(mail), lambda: stage_1(mail)])

A job that fails calls mail.fail() (run() does it for it): every take() waiting then returns
None at once, and its job ends. run() raises the first failure of a stage's own work (a transfer
or an op that ran out names the device that is late), else the first wait that ran out: a wait
names the stage that did not send, but that stage may be held in a transfer to a stalled device
(the waiting stage's own: a transfer needs both sides), whose error comes by its own deadline.

Tessel's ops, relayouts and tape gradients release the GIL while C++ runs them (dispatch, the
kernels' enqueueing, a transfer's wait) and a waiting take() releases it too, so a stage waiting
for its neighbour does not hold the others; the Python between ops (gpt.py's model code) holds
it, so the stages' threads issue their ops one at a time, and overlap in the devices' streams.
"""
import threading
import time

import tessel


class Mailbox:
    """Values keyed by what they are (an activation or a gradient of one virtual stage and
    microbatch), put by the stage that sends them and taken by the one that reads them."""

    def __init__(self):
        self._ready = threading.Condition()
        self._values = {}
        self._failed = False
        self.waits_ran_out = []  # the errors take() raised

    @property
    def failed(self):
        return self._failed

    def put(self, key, value):
        with self._ready:
            self._values[key] = value
            self._ready.notify_all()

    def fail(self):
        """A stage failed: every take() ends (returning None), now and later."""
        with self._ready:
            self._failed = True
            self._ready.notify_all()

    def take(self, key, timeout, late):
        """The value put under `key`, removed; None when a stage failed first; past `timeout`
        seconds tessel.DeadlineExceededError with the message late() returns."""
        deadline = time.monotonic() + timeout
        with self._ready:
            while not self._failed and key not in self._values:
                left = deadline - time.monotonic()
                if left <= 0:
                    error = tessel.DeadlineExceededError(late())
                    self.waits_ran_out.append(error)
                    raise error
                self._ready.wait(left)
            return None if self._failed else self._values.pop(key)


def run(jobs, mail, name="pipeline stage"):
    """Runs jobs[i] on thread i (named "<name> i") and waits for all of them; a job's exception
    calls mail.fail(), which ends the others' waits, and the first failure of a stage's own work
    (else the first wait that ran out) is raised here. A job that never returns is waited for
    (bound its waits, as Mailbox.take does)."""
    errors = []

    def guarded(job):
        try:
            job()
        except BaseException as e:  # noqa: B036 -- raised again below, on the caller's thread
            errors.append(e)  # list.append is atomic: the first failure stays first
            mail.fail()

    threads = [threading.Thread(target=guarded, args=(job,), name=f"{name} {i}", daemon=True)
               for i, job in enumerate(jobs)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    own = [e for e in errors if not any(e is w for w in mail.waits_ran_out)]
    if errors:
        raise (own or errors)[0]
