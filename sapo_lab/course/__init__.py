"""Teaching aids: answer digests for the book's exercise checks, and the graded SAPO assignment's grader.

The grader (:mod:`sapo_lab.course.grader`) loads a student's module and compares it with frozen outputs;
:mod:`sapo_lab.course.answers` lets a check cell compare a number with a digest instead of a literal a
student could copy.
"""

from .answers import answer_digest, matches

__all__ = ["answer_digest", "matches"]
