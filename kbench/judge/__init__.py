"""What decides a verdict, in the worker's processes: the judge, the reference's child and what they share here;
the candidate's process and its protocol (candidate/), the checks beyond timing (checks/), the timing (timing/)."""
