"""The machinery every part shares: the minibatch training loop, the per-datum objectives, a
fit's context and problem, callbacks and loggers, per-example gradient statistics, running a net
under chosen site values, prediction and the learner's random streams."""
