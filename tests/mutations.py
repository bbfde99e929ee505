"""Mutation run over the modules that hold the methods' math: ``make mutations``.

Each mutation is one small, plausible bug a reviewer would think of — a flipped sign, swapped
arguments, a dropped term of an update equation — written by hand beside the test files that
should catch it. For every mutation the runner copies the committed tree into a temporary
folder, puts the bug in, runs those test files there and reports whether a test failed (the
mutant is *killed*) or not (it *survived*: a hole in the suite, or an equivalent change, which
the list below must argue).

Why hand-written mutations rather than mutmut or cosmic-ray: those generate every operator swap
in a module (thousands here) and run the suite for each, days on this 2-core machine, and most
of what they generate is in argument checking and messages; ours are the equations, each named
after the paper's, and the whole list runs in minutes. The price is that the list is only as
good as its author: add a mutation with every change to a method's math.

    python tests/mutations.py                 # every mutation; exit status 1 if any survives
    python tests/mutations.py --only ivon     # those whose name contains "ivon"
    python tests/mutations.py --list
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


@dataclass(frozen=True)
class Mutation:
    """Replace ``old`` (which must occur exactly once) by ``new`` in ``path``; ``tests`` should
    fail."""

    name: str
    path: str
    old: str
    new: str
    tests: tuple[str, ...]


MUTATIONS = [
    # closed-form KLs
    Mutation(
        "kl: Gaussian KL without the log-variance ratio",
        "pyro_cl/kl.py",
        "return 0.5 * (quadratic - 1.0 - log_variance_q + variance_p.log())",
        "return 0.5 * (quadratic - 1.0)",
        ("tests/test_kl.py", "tests/test_packed_gaussians.py"),
    ),
    Mutation(
        "kl: precision KL with + log s written - log s",
        "pyro_cl/kl.py",
        "(precision.reciprocal() + difference * difference) + precision.log()",
        "(precision.reciprocal() + difference * difference) - precision.log()",
        ("tests/test_packed_gaussians.py", "tests/test_ivon.py"),
    ),
    Mutation(
        "laplace prior: the folded normal's drift term with its sign flipped",
        "pyro_cl/kl.py",
        ") + difference * torch.erf(standardised)",
        ") - difference * torch.erf(standardised)",
        ("tests/test_priors.py",),
    ),
    Mutation(
        "laplace prior: the entropy term dropped from the KL",
        "pyro_cl/kl.py",
        "return (2.0 * scale_p).log() + folded_mean / scale_p - entropy",
        "return (2.0 * scale_p).log() + folded_mean / scale_p",
        ("tests/test_priors.py",),
    ),
    Mutation(
        "laplace prior: the fast route reads the Laplace's scale as a Gaussian's",
        "pyro_cl/infer/objectives.py",
        "return module.prior(attribute)\n",
        "return __import__('pyro').distributions.Normal(*module.prior_location_and_scale(attribute)).to_event(module.prior(attribute).event_dim)\n",
        ("tests/test_priors.py",),
    ),
    Mutation(
        "laplace prior: packing keeps the Laplace-prior sites under the Gaussian KL",
        "pyro_cl/infer/packed_gaussians.py",
        "or isinstance(base_distribution(read_priors_of(*index[name])), Normal)",
        "or True",
        ("tests/test_priors.py",),
    ),
    Mutation(
        "a first prior of another family: the layer keeps the Gaussian in its buffers instead",
        "pyro_cl/nn/layer.py",
        "self._other_priors[name] = detach_distribution(base).to_event(event_dim)",
        "self._other_priors.pop(name, None)",
        ("tests/test_priors.py", "tests/test_student_t_prior.py"),
    ),
    Mutation(
        "kl: the Monte Carlo KL as log p - log q",
        "pyro_cl/kl.py",
        "return (q.log_prob(value) - p.log_prob(value)).sum()",
        "return (p.log_prob(value) - q.log_prob(value)).sum()",
        ("tests/test_kl.py", "tests/test_student_t_prior.py"),
    ),
    Mutation(
        "scale mixture prior: the slab's and the spike's weights swapped",
        "pyro_cl/nn/scale_mixture_prior.py",
        "+ (-self.slab_weight).log1p()",
        "+ self.slab_weight.log()",
        ("tests/test_scale_mixture_prior.py",),
    ),
    Mutation(
        "scale mixture prior: the variance weighs the spike by π",
        "pyro_cl/nn/scale_mixture_prior.py",
        "(1 - weight) * self.spike_scale**2",
        "weight * self.spike_scale**2",
        ("tests/test_scale_mixture_prior.py",),
    ),
    Mutation(
        "probabilistic PCA: W without the noise taken off its eigenvalues",
        "pyro_cl/fitters/context_points.py",
        "(eigenvalues[kept:] - noise).clamp(min=0).sqrt()",
        "eigenvalues[kept:].clamp(min=0).sqrt()",
        ("tests/test_function_space.py",),
    ),
    Mutation(
        "matrix normal KL: the columns' log-determinant weighed by p, not n",
        "pyro_cl/guides/kronecker.py",
        "+ n * (log_det(prior_column_tril) - log_det(column_tril))",
        "+ p * (log_det(prior_column_tril) - log_det(column_tril))",
        ("tests/test_kronecker_guide.py",),
    ),
    Mutation(
        "matrix normal KL: the traces added, not multiplied",
        "pyro_cl/guides/kronecker.py",
        "trace_rows * trace_columns",
        "trace_rows + trace_columns",
        ("tests/test_kronecker_guide.py",),
    ),
    Mutation(
        "matrix normal density: the columns' log-determinant weighed by p",
        "pyro_cl/guides/kronecker.py",
        "log_det = p * 2 * self.row_tril.diagonal().log().sum() + n * 2 * (",
        "log_det = p * 2 * self.row_tril.diagonal().log().sum() + p * 2 * (",
        ("tests/test_kronecker_guide.py",),
    ),
    Mutation(
        "matrix normal draws: B instead of Bᵀ",
        "pyro_cl/guides/kronecker.py",
        "spread = self.row_tril @ noise @ self.column_tril.T",
        "spread = self.row_tril @ noise @ self.column_tril",
        ("tests/test_kronecker_guide.py",),
    ),
    Mutation(
        "coreset refit (VCL eq. 3): a block's sites detached one by one, the block dropped",
        "pyro_cl/learner/memory_step.py",
        "refits[key] = detach_posterior(posterior)",
        "refits[key] = {name: detach_distribution(q) for name, q in posterior.items()}",
        ("tests/test_guide_families.py", "tests/test_kronecker_guide.py"),
    ),
    Mutation(
        "a saved block: each site rebuilds a block of its own",
        "pyro_cl/guides/joint_gaussian.py",
        "key = memo.setdefault(id(self.joint), len(memo))",
        "key = memo.setdefault(id(self), len(memo))",
        ("tests/test_guide_families.py",),
    ),
    Mutation(
        "function space: a draw's old moments taken at the first draw's points, not the kept set",
        "pyro_cl/fitters/function_space.py",
        "            fixed = target(candidates)\n",
        "            fixed = target(points)\n",
        ("tests/test_function_space.py",),
    ),
    Mutation(
        "function space beside replay: the replayed points added to the context again",
        "pyro_cl/fitters/function_space.py",
        "            self.context.after_task(problem.data.select(own))\n",
        "            self.context.after_task(problem.data)\n",
        ("tests/test_experience_replay.py",),
    ),
    Mutation(
        "function space beside replay: the step's second fit adds context points too",
        "pyro_cl/fitters/function_space.py",
        "later = self._step is not None and self._step() is context",
        "later = False",
        ("tests/test_experience_replay.py",),
    ),
    Mutation(
        "geodesic domains: the fractions k/K instead of k/(K+1)",
        "pyro_cl/data/geodesic.py",
        "torch.lerp(start, end, k / (steps + 1))",
        "torch.lerp(start, end, k / steps)",
        ("tests/test_domain_graph.py",),
    ),
    Mutation(
        "geodesic domains: each source point paired with the target point of its index",
        "pyro_cl/data/geodesic.py",
        "start, end = source[rows.to(source.device)], target[columns.to(source.device)].to(source)",
        "start, end = source, target.to(source)",
        ("tests/test_domain_graph.py",),
    ),
    Mutation(
        "linearised moments: a linear layer's bias variance dropped",
        "pyro_cl/nn/linear.py",
        '            total = total + g2 @ variances["bias"]',
        "            total = total",
        ("tests/test_function_space.py",),
    ),
    Mutation(
        "linearised moments: the output gradient not squared",
        "pyro_cl/nn/linear.py",
        "g2 = output_gradient.square()\n        total",
        "g2 = output_gradient.abs()\n        total",
        ("tests/test_function_space.py",),
    ),
    Mutation(
        "linearised moments: a convolution's bias gradient not squared",
        "pyro_cl/nn/conv.py",
        'total = total + output_gradient.sum((-2, -1)).square() @ variances["bias"]',
        'total = total + output_gradient.sum((-2, -1)) @ variances["bias"]',
        ("tests/test_function_space.py",),
    ),
    Mutation(
        "linearised moments: a convolution's kernel gradients read without the stride",
        "pyro_cl/nn/conv.py",
        "dilation=self.stride,",
        "dilation=1,",
        ("tests/test_function_space.py", "tests/test_conv.py"),
    ),
    # the ELBO and its tempering
    Mutation(
        "elbo: the KL term not weighted by β (tempered VCL)",
        "pyro_cl/infer/objectives.py",
        "return kl_weight * kl / dataset_size - log_likelihood / x.shape[0]",
        "return kl / dataset_size - log_likelihood / x.shape[0]",
        ("tests/test_tempered_vcl.py",),
    ),
    Mutation(
        "natural gradient: tempering multiplies the data size instead of dividing it",
        "pyro_cl/fitters/natural_gradient.py",
        "effective_size = self.data_scale * num_data / self.kl_weight",
        "effective_size = self.data_scale * num_data * self.kl_weight",
        ("tests/test_tempered_vcl.py",),
    ),
    # VOGN (thesis eq. 52/53) and IVON (Shen et al. algorithm 1)
    Mutation(
        "vogn: prior term dropped from the mean's direction",
        "pyro_cl/fitters/vogn.py",
        "direction = gradient + prior_precision * (loc - prior_loc)",
        "direction = gradient",
        ("tests/test_vogn.py", "tests/test_tempered_vcl.py"),
    ),
    Mutation(
        "vogn: prior precision dropped from the precision's target",
        "pyro_cl/fitters/vogn.py",
        "precision.mul_(1 - beta).add_(squared * scale + prior_precision, alpha=beta)",
        "precision.mul_(1 - beta).add_(squared * scale, alpha=beta)",
        ("tests/test_vogn.py", "tests/test_tempered_vcl.py"),
    ),
    Mutation(
        "ivon: prior term δ(m - μ_p) dropped from the update direction",
        "pyro_cl/fitters/ivon.py",
        "direction = g * debias + delta * (loc - prior_loc)",
        "direction = g * debias",
        ("tests/test_ivon.py",),
    ),
    Mutation(
        "ivon: the Hessian's correction term with its sign flipped",
        "pyro_cl/fitters/ivon.py",
        ".add_(hessian, alpha=1 - beta2).add_(correction)",
        ".add_(hessian, alpha=1 - beta2).sub_(correction)",
        ("tests/test_ivon.py",),
    ),
    Mutation(
        "ivon: the momentum not debiased",
        "pyro_cl/fitters/ivon.py",
        "direction = g * debias + delta",
        "direction = g + delta",
        ("tests/test_ivon.py",),
    ),
    # transitions (Kurle et al. 2020, section 4)
    Mutation(
        "forgetting: ρ and 1 - ρ swapped in the mix with the initial prior",
        "pyro_cl/transitions/forgetting.py",
        "return (1.0 - rho) * initial + rho * current",
        "return rho * initial + (1.0 - rho) * current",
        ("tests/test_transitions_drift.py",),
    ),
    Mutation(
        "ornstein-uhlenbeck: the added variance with e^{-a} instead of e^{-2a}",
        "pyro_cl/transitions/diffusion.py",
        "(1 - decay**2) * initial_scale.square()",
        "(1 - decay) * initial_scale.square()",
        ("tests/test_transitions_drift.py",),
    ),
    Mutation(
        "linear Gaussian step: the variance carried with a, not a²",
        "pyro_cl/transitions/base.py",
        "return a * loc + b, (a**2 * scale.square() + v).sqrt()",
        "return a * loc + b, (a * scale.square() + v).sqrt()",
        ("tests/test_transitions_drift.py",),
    ),
    Mutation(
        "wiener: the diffusion c added to the variance unsquared (c, not c²)",
        "pyro_cl/transitions/diffusion.py",
        "return self.diffusion**2 * context.scaled_elapsed(self.time_constant)",
        "return self.diffusion * context.scaled_elapsed(self.time_constant)",
        ("tests/test_transitions_drift.py",),
    ),
    # combining posteriors (graph VCL)
    Mutation(
        "combination: the product's mean not divided by its precision",
        "pyro_cl/transitions/combination.py",
        "result = dist.Normal(loc / precision, precision.rsqrt())",
        "result = dist.Normal(loc, precision.rsqrt())",
        ("tests/test_posterior_combination.py", "tests/test_graph_vcl.py"),
    ),
    Mutation(
        "graph vcl: edge weights read transposed",
        "pyro_cl/learner/graph_vcl.py",
        "weights = [float(self.weights[domain, p]) for p in parents]",
        "weights = [float(self.weights[p, domain]) for p in parents]",
        ("tests/test_graph_vcl.py",),
    ),
    Mutation(
        "graph vcl: a target predicted from its first parent only",
        "pyro_cl/learner/graph_vcl.py",
        "sites = self.prior_for(domain, parents)\n",
        "sites = self.prior_for(domain, parents[:1])\n",
        ("tests/test_graph_vcl.py",),
    ),
    # memories: coresets and Gaussian residual scoring (Kurle et al. eq. 5, 8)
    Mutation(
        "random coreset: the first K points instead of a random K",
        "pyro_cl/memory/random_coreset.py",
        "return torch.randperm(len(candidates), device=candidates.x.device)[:size]",
        "return torch.arange(size, device=candidates.x.device)",
        ("tests/test_coresets.py",),
    ),
    Mutation(
        "recent memory: the oldest points kept instead of the newest",
        "pyro_cl/memory/recent.py",
        "return torch.arange(len(candidates) - size, len(candidates), device=candidates.x.device)",
        "return torch.arange(size, device=candidates.x.device)",
        ("tests/test_online_memory.py",),
    ),
    Mutation(
        "variance learning rate: the log-variances put in the learning rate's group",
        "pyro_cl/infer/training.py",
        '(variances if LOG_VARIANCE in name.split(".") else rest).append(parameter)',
        "rest.append(parameter)",
        ("tests/test_variance_learning_rate.py",),
    ),
    Mutation(
        "variance learning rate: the groups' rates swapped",
        "pyro_cl/infer/training.py",
        'groups.append({"params": variances, "lr": optimisation.variance_learning_rate})',
        'groups.append({"params": variances, "lr": optimisation.learning_rate})\n        groups[0]["lr"] = optimisation.variance_learning_rate',
        ("tests/test_variance_learning_rate.py",),
    ),
    Mutation(
        "run checkpoint: the learner's saved state not put back on resume",
        "pyro_cl/app/run_checkpoint.py",
        'restore_learner(learner, run["learner"])',
        "pass",
        ("tests/test_run_checkpoint.py",),
    ),
    Mutation(
        "grs: the residual score with its sign flipped",
        "pyro_cl/memory/gaussian_factors.py",
        "return self.expected_log_likelihood - self.expected_log_factor(posterior)",
        "return self.expected_log_factor(posterior) - self.expected_log_likelihood",
        ("tests/test_online_memory.py",),
    ),
    Mutation(
        "gaussian factors: Λ's sign flipped (eq. 5a)",
        "pyro_cl/memory/gaussian_factors.py",
        "precision = {n: -(weighted[n] / num_samples) / scales[n] for n in locs}",
        "precision = {n: (weighted[n] / num_samples) / scales[n] for n in locs}",
        ("tests/test_online_memory.py",),
    ),
    Mutation(
        "memory budget: a step's K points counted against the task, not the step",
        "pyro_cl/memory/protocol.py",
        "steps = torch.stack([points.task_ids.double(), points.times.double()], dim=1)",
        "steps = points.task_ids.double().unsqueeze(1)",
        ("tests/test_save_load.py",),
    ),
    # H-IBP (supplement eq. 3)
    Mutation(
        "h-ibp: the child sticks' Beta arguments swapped",
        "pyro_cl/nn/ibp_mask.py",
        "Beta(alpha * parent, alpha * (1 - parent), validate_args=False)",
        "Beta(alpha * (1 - parent), alpha * parent, validate_args=False)",
        ("tests/test_ibp.py",),
    ),
    # baselines
    Mutation(
        "ewc: the Fisher not rescaled to the task's size (N/S dropped)",
        "pyro_cl/baselines/curvature.py",
        "return {name: value * (n / len(index)) for name, value in total.items()}",
        "return {name: value for name, value in total.items()}",
        ("tests/test_baselines.py",),
    ),
    Mutation(
        "si: the path integral's sign flipped",
        "pyro_cl/baselines/synaptic_intelligence.py",
        "self.path[name] -= value.grad * (value - self.previous[name])",
        "self.path[name] += value.grad * (value - self.previous[name])",
        ("tests/test_baselines.py",),
    ),
    # FiLM layers and function-space VI (this round's methods)
    Mutation(
        "film: the scale's prior centred at 0 instead of the identity",
        "pyro_cl/nn/film.py",
        "self.weight_prior_loc.fill_(1.0)",
        "self.weight_prior_loc.fill_(0.0)",
        ("tests/test_film.py",),
    ),
    Mutation(
        "film: the shift's per-example gradient taken as the scale's",
        "pyro_cl/nn/film.py",
        'return {"weight": scale, "bias": output_gradient}',
        'return {"weight": scale, "bias": scale}',
        ("tests/test_film.py", "tests/test_per_example.py"),
    ),
    Mutation(
        "gvcl λ: the data's precision weighed λ times on top of the KL's (λ for λ - 1)",
        "pyro_cl/fitters/mean_precision.py",
        "return 0.5 * (weight - 1) * total",
        "return 0.5 * weight * total",
        ("tests/test_tempered_vcl.py",),
    ),
    Mutation(
        "gvcl λ: a prior wider than the initial one held as if the data had narrowed it",
        "pyro_cl/fitters/mean_precision.py",
        "return added.clamp(min=0).detach()",
        "return added.abs().detach()",
        ("tests/test_tempered_vcl.py",),
    ),
    Mutation(
        "gvcl λ: the initial prior's precision added, not taken away",
        "pyro_cl/fitters/mean_precision.py",
        "added = added - base_distribution(initial_prior).variance.reciprocal()",
        "added = added + base_distribution(initial_prior).variance.reciprocal()",
        ("tests/test_tempered_vcl.py",),
    ),
    Mutation(
        "gvcl λ: the mean term's difference not weighted by β",
        "pyro_cl/fitters/elbo_fitter.py",
        "return lambda: kl_weight * term()",
        "return term",
        ("tests/test_tempered_vcl.py",),
    ),
    Mutation(
        "gvcl λ: the packed fit's means read from the guide's tensors (no gradient reaches Adam's)",
        "pyro_cl/fitters/mean_precision.py",
        "outside = [name for name in held if name not in inside]",
        "outside = list(held)",
        ("tests/test_tempered_vcl.py",),
    ),
    Mutation(
        "gvcl start: the variances capped from below, not above",
        "pyro_cl/guides/mean_field.py",
        "self.log_variance[key].clamp_(max=log_variance)",
        "self.log_variance[key].clamp_(min=log_variance)",
        ("tests/test_reinitialise.py",),
    ),
    Mutation(
        "gvcl's fresh start: the means kept (cap_variance's start)",
        "pyro_cl/guides/mean_field.py",
        'elif policy in ("fresh", "fresh_cap_variance"):',
        'elif policy == "fresh":',
        ("tests/test_reinitialise.py",),
    ),
    Mutation(
        "gvcl's fresh start: the variances reset, not capped",
        "pyro_cl/guides/mean_field.py",
        'if policy in ("cap_variance", "fresh_cap_variance"):',
        'if policy == "cap_variance":',
        ("tests/test_reinitialise.py",),
    ),
    Mutation(
        "function space with kept labels: their log-likelihood's sign flipped",
        "pyro_cl/fitters/function_space.py",
        "term = term - self.label_weight * log_likelihood",
        "term = term + self.label_weight * log_likelihood",
        ("tests/test_function_space.py",),
    ),
    Mutation(
        "function space with kept labels: the weight λ dropped (each kept label once)",
        "pyro_cl/fitters/function_space.py",
        "term = term - self.label_weight * log_likelihood",
        "term = term - log_likelihood",
        ("tests/test_function_space.py",),
    ),
    Mutation(
        "function space with kept labels: the draws summed, not averaged (S times the term)",
        "pyro_cl/fitters/function_space.py",
        "model.likelihood.log_prob(draws, y).mean(0).sum()",
        "model.likelihood.log_prob(draws, y).sum()",
        ("tests/test_function_space.py",),
    ),
    Mutation(
        "function space: the KL's variance ratio inverted",
        "pyro_cl/fitters/function_space.py",
        "0.5 * (total_q * inverse_p - log_ratio",
        "0.5 * (total_p / total_q - log_ratio",
        ("tests/test_function_space.py", "tests/test_no_silent_result.py"),
    ),
    Mutation(
        "learned strength: the evidence of earlier steps not gathered (eq. 2 as eq. 1 alone)",
        "pyro_cl/transitions/learned_strength.py",
        "self.evidences[group] = gathered + torch.tensor(scores).double()",
        "self.evidences[group] = torch.tensor(scores).double()",
        ("tests/test_learned_strength.py",),
    ),
    Mutation(
        "learned strength: the weakest strength taken instead of the most likely",
        "pyro_cl/transitions/learned_strength.py",
        "grid[int(torch.argmax(self.evidences[group]))]",
        "grid[int(torch.argmin(self.evidences[group]))]",
        ("tests/test_learned_strength.py",),
    ),
    Mutation(
        "learned strength: the evidence's log-mean over draws taken as a mean of logs",
        "pyro_cl/likelihoods.py",
        "return torch.logsumexp(log_probs, dim=0) - math.log(samples.shape[0])",
        "return log_probs.mean(0)",
        ("tests/test_learned_strength.py",),
    ),
    Mutation(
        "replay: a point estimate's likelihood weights read and dropped",
        "pyro_cl/infer/objectives.py",
        "per_group.append(terms if weights is None else terms * weights[rows])",
        "per_group.append(terms)",
        ("tests/test_experience_replay.py",),
    ),
    Mutation(
        "generated replay: every drawn image labelled with the first class seen",
        "pyro_cl/generative/replay.py",
        "torch.full((count,), label, dtype=like_y.dtype",
        "torch.full((count,), labels[0], dtype=like_y.dtype",
        ("tests/test_generated_replay.py",),
    ),
    Mutation(
        "generated replay: a class's images drawn from the next class's head",
        "pyro_cl/generative/replay.py",
        "generate(self.generator, task_id=label,",
        "generate(self.generator, task_id=labels[(index + 1) % len(labels)],",
        ("tests/test_generated_replay.py",),
    ),
    Mutation(
        "generated replay: a posterior's prior handed on with the drawn images in it",
        "pyro_cl/generative/replay.py",
        "remaining = torch.arange(len(new) if refit else 0, device=new.x.device)",
        "remaining = torch.arange(0, device=new.x.device)",
        ("tests/test_generated_replay.py",),
    ),
    Mutation(
        "generated replay: a rolled-back step leaves the generator as it learnt",
        "pyro_cl/generative/replay.py",
        "generator.restore_into(self.generator)",
        "generator.to_state()",
        ("tests/test_generated_replay.py",),
    ),
    Mutation(
        "adam moments: a carried state kept but never handed to the next fit's Adam",
        "pyro_cl/infer/training.py",
        "        moments.load_into(optimizer, parameters)\n",
        "        pass\n",
        ("tests/test_adam_moments.py",),
    ),
    Mutation(
        "adam moments: the step count restarted at every fit, the moments kept",
        "pyro_cl/infer/adam_moments.py",
        'step = kept["step"].to(parameter.device if on_device else "cpu", copy=True)',
        'step = torch.zeros_like(kept["step"], device=parameter.device if on_device else "cpu")',
        ("tests/test_adam_moments.py",),
    ),
    Mutation(
        "adam moments: a failed step leaves the moments its fit reached",
        "pyro_cl/learner/state.py",
        "        learner.adam_moments.load_state_dict(self.adam_moments)\n",
        "",
        ("tests/test_adam_moments.py",),
    ),
    Mutation(
        "adam moments: a memory's refit steps training's Adam",
        "pyro_cl/learner/memory_step.py",
        "checked_fit(learner, self.context.with_fresh_adam(), guide, problem)",
        "checked_fit(learner, self.context, guide, problem)",
        ("tests/test_adam_moments.py",),
    ),
    Mutation(
        "replay: a repeated buffer's copies each weighed as the whole point (r times too much)",
        "pyro_cl/memory/experience_replay.py",
        "memory = memory.select(torch.arange(len(memory), device=memory.x.device).repeat(times))",
        "memory = memory.weighted(memory.likelihood_weights() * (len(new) / len(memory)))\n"
        "            memory = memory.select(torch.arange(len(memory), device=memory.x.device).repeat(times))\n"
        "            return memory",
        ("tests/test_experience_replay.py",),
    ),
    Mutation(
        "function space: the old moments' chunks of points taken in reverse",
        "pyro_cl/infer/site_values.py",
        "model.net_outputs(inputs[:, start : start + points], task)",
        "model.net_outputs(inputs[:, start : start + points].flip(1), task)",
        ("tests/test_function_space.py",),
    ),
    Mutation(
        "replay: the balanced buffer weighed |M|/|D| instead of |D|/|M|",
        "pyro_cl/memory/experience_replay.py",
        "likelihood_weights() * (len(new) / len(memory))",
        "likelihood_weights() * (len(memory) / len(new))",
        ("tests/test_experience_replay.py",),
    ),
    Mutation(
        "function space: the sample mean's noise left in the squared mean difference",
        "pyro_cl/fitters/function_space.py",
        "square = square - variance_q / draws_q",
        "square = square",
        ("tests/test_no_silent_result.py",),
    ),
    Mutation(
        "function space: the log sample variance's bias added, not taken off",
        "pyro_cl/fitters/function_space.py",
        "log_ratio = log_ratio - _log_variance_bias(draws_q)",
        "log_ratio = log_ratio + _log_variance_bias(draws_q)",
        ("tests/test_no_silent_result.py",),
    ),
    Mutation(
        "function space: 1/v_p's bias factor inverted",
        "pyro_cl/fitters/function_space.py",
        "(draws_p - 3) / (draws_p - 1)",
        "(draws_p - 1) / (draws_p - 3)",
        ("tests/test_no_silent_result.py",),
    ),
    Mutation(
        "function space: the fitter's moments taken as exact",
        "pyro_cl/fitters/function_space.py",
        "return self.context_samples, None if first else self.target_samples",
        "return None, None",
        ("tests/test_no_silent_result.py",),
    ),
    Mutation(
        "function space: the parameter KL kept on the first task's weight after it",
        "pyro_cl/fitters/function_space.py",
        "return 1.0  # VCL's ELBO against the initial prior",
        "return self.kl_weight",
        ("tests/test_function_space.py",),
    ),
    Mutation(
        "function space: per-step context points scored against the first draw's target",
        "pyro_cl/fitters/function_space.py",
        "            return target(draw(problem.data))\n",
        "            return target(points)\n",
        ("tests/test_function_space.py",),
    ),
    Mutation(
        "function space: per point weighed by |X_C| / N instead of N / |X_C|",
        "pyro_cl/fitters/function_space.py",
        "kl = kl * (num_data / x.shape[0])",
        "kl = kl * (x.shape[0] / num_data)",
        ("tests/test_function_space.py",),
    ),
    Mutation(
        "drift streams: a column constant up to rounding divided by its rounding",
        "pyro_cl/data/streams.py",
        "return ~(std > 64 * np.finfo(precision).eps * np.maximum(np.abs(mean), 1.0))",
        "return ~(std > 0)",
        ("tests/test_drift_data.py",),
    ),
    Mutation(
        "drift streams: a column that varies late keeps its raw scale (left at 1)",
        "pyro_cl/data/streams.py",
        "scales[column] = values.std()",
        "scales[column] = 1.0",
        ("tests/test_drift_data.py",),
    ),
    Mutation(
        "drift streams: a late column scaled by every row from its first varying step on",
        "pyro_cl/data/streams.py",
        "values = x[start:end, column]",
        "values = x[start:, column]",
        ("tests/test_drift_data.py",),
    ),
    Mutation(
        "learned strength per layer: sites grouped by their last name part, not their layer",
        "pyro_cl/transitions/learned_strength.py",
        'return site.rsplit(".", 1)[0] if self.per == "layer" else site',
        'return site.rsplit(".", 1)[-1] if self.per == "layer" else site',
        ("tests/test_learned_strength.py",),
    ),
    Mutation(
        "learned strength per layer (eq. 3): every group carried at the largest strength",
        "pyro_cl/transitions/learned_strength.py",
        "carried |= self._at(strengths.get(group, self.low))(sites, context)",
        "carried |= self._at(max(strengths.values(), default=self.low))(sites, context)",
        ("tests/test_learned_strength.py",),
    ),
    Mutation(
        "learned strength per layer (eq. 3): one evidence gathered for every group",
        "pyro_cl/transitions/learned_strength.py",
        "gathered = self.discount * self.evidences.get(group, 0.0)",
        "gathered = self.discount * sum(self.evidences.values(), torch.zeros(self.points))",
        ("tests/test_learned_strength.py",),
    ),
    Mutation(
        "function prior: the outputs' prior variance taken as 1, not v",
        "pyro_cl/fitters/function_space.py",
        "x.new_tensor(self.function_prior_variance)",
        "x.new_tensor(1.0)",
        ("tests/test_function_space.py",),
    ),
    Mutation(
        "function prior: the first task's uniform inputs drawn once, not at every step",
        "pyro_cl/fitters/function_space.py",
        "draw, per_step = uniform.draw, True",
        "draw, per_step = uniform.draw, False",
        ("tests/test_function_space.py",),
    ),
    Mutation(
        "function prior: the first task keeps VCL's full weight KL beside it",
        "pyro_cl/fitters/function_space.py",
        "if self._first_task and self.function_prior_variance is None:",
        "if self._first_task:",
        ("tests/test_function_space.py",),
    ),
    Mutation(
        "function space: context_draws ignored (every kept point at every step)",
        "pyro_cl/fitters/function_space.py",
        "context = FromMemory(context, per_task=context_draws, total=context_total)",
        "context = FromMemory(context, total=context_total)",
        ("tests/test_function_space.py",),
    ),
    Mutation(
        "context points: uniform inputs from the first task's range only",
        "pyro_cl/fitters/context_points.py",
        "        if self._range is not None:\n            seen",
        "        if False:\n            seen",
        ("tests/test_function_space.py",),
    ),
    Mutation(
        "context points: Gaussian inputs drawn with the Cholesky factor untransposed (L^T L)",
        "pyro_cl/fitters/context_points.py",
        "noise = z @ factor.T if",
        "noise = z @ factor if",
        ("tests/test_function_space.py",),
    ),
    Mutation(
        "context points: Gaussian inputs' pooled moments without the between-sets term",
        "pyro_cl/fitters/context_points.py",
        '"scatter": old["scatter"] + new["scatter"] + weight * cross,',
        '"scatter": old["scatter"] + new["scatter"],',
        ("tests/test_function_space.py",),
    ),
    Mutation(
        "context points: Gaussian inputs' pooled mean weighed by the old count",
        "pyro_cl/fitters/context_points.py",
        '"mean": old["mean"] + delta * new["count"] / count,',
        '"mean": old["mean"] + delta * old["count"] / count,',
        ("tests/test_function_space.py",),
    ),
    Mutation(
        "context points: the fitted task's own head held at its own inputs",
        "pyro_cl/fitters/context_points.py",
        "earlier = [t for t in self._tasks if t not in data.tasks()]",
        "earlier = list(self._tasks)",
        ("tests/test_function_space.py",),
    ),
    Mutation(
        "context points: the same kept points drawn at every step",
        "pyro_cl/fitters/context_points.py",
        "order = torch.randperm(len(rows), device=rows.device)[: self.per_task]",
        "order = torch.arange(len(rows), device=rows.device)[: self.per_task]",
        ("tests/test_function_space.py",),
    ),
    # the bank of learners and prediction at a time
    Mutation(
        "bank: evidence from the uncarried posterior (the drift ignored)",
        "pyro_cl/learner/bank.py",
        "scored_at = time if self.at_time else None",
        "scored_at = None",
        ("tests/test_learner_bank.py",),
    ),
    Mutation(
        "bank: members with a memory scored at the step's time (at_time ignored)",
        "pyro_cl/learner/bank.py",
        "scored_at = time if self.at_time else None",
        "scored_at = time",
        ("tests/test_learner_bank.py",),
    ),
    Mutation(
        "bank: the discount dropped",
        "pyro_cl/learner/bank.py",
        "log_weights = self.discount * self.log_weights + evidence",
        "log_weights = self.log_weights + evidence",
        ("tests/test_learner_bank.py",),
    ),
    Mutation(
        "moving bank: the copy a rung up is the weakest's, not the strongest's (eq. 3)",
        "pyro_cl/learner/moving_bank.py",
        "dropped, end = learners[0], learners[-1]",
        "dropped, end = learners[0], learners[0]",
        ("tests/test_moving_bank.py",),
    ),
    Mutation(
        "moving bank: the copy starts with the dropped member's weight (eq. 3)",
        "pyro_cl/learner/moving_bank.py",
        "weights = torch.cat([weights[1:], weights[-1:]])",
        "weights = torch.cat([weights[1:], weights[:1]])",
        ("tests/test_moving_bank.py",),
    ),
    Mutation(
        "moving bank: the window moves the wrong way (eq. 3)",
        "pyro_cl/learner/moving_bank.py",
        "self.bottom += step",
        "self.bottom -= step",
        ("tests/test_moving_bank.py",),
    ),
    Mutation(
        "moving bank: a tie moves the window",
        "pyro_cl/learner/moving_bank.py",
        "if not bool(weights[best] > others.max()):",
        "if not bool(weights[best] >= others.max()):",
        ("tests/test_moving_bank.py",),
    ),
    Mutation(
        "learner: prior_at leaves the transition's side effects in place",
        "pyro_cl/learner/prediction.py",
        "            before.restore_into(self)\n",
        "            pass\n",
        ("tests/test_learner_bank.py",),
    ),
    Mutation(
        "learner: a learner refused at construction keeps its net",
        "pyro_cl/learner/ownership.py",
        "        del _OWNERS[net]\n",
        "        pass\n",
        ("tests/test_multihead.py",),
    ),
    Mutation(
        "transition context: the mean lag over the steps counted one too many",
        "pyro_cl/transitions/base.py",
        "mean_lag=(time - times[0]) / len(times),",
        "mean_lag=(time - times[0]) / (len(times) + 1),",
        ("tests/test_transitions_drift.py", "tests/test_learned_strength.py"),
    ),
    # checkpoints
    Mutation(
        "checkpoint: the memory's points not restored on load",
        "pyro_cl/learner/state.py",
        "memory_points=None if points is None else Points.from_state(points, device),",
        "memory_points=None,",
        ("tests/test_save_load.py",),
    ),
    # guide families: the joint Gaussian's KL, its handoff and its draws
    Mutation(
        "kl: full-covariance KL without the log-determinant ratio",
        "pyro_cl/kl.py",
        "return 0.5 * (solved.square().sum() - loc_q.shape[-1]) + log_det",
        "return 0.5 * (solved.square().sum() - loc_q.shape[-1])",
        ("tests/test_guide_families.py",),
    ),
    Mutation(
        "guides: the joint posterior not handed to the next prior",
        "pyro_cl/guides/joint_gaussian.py",
        "        for key in self._blocks_of(names):\n            joint = self.joint(key)\n            self.prior_loc[key].copy_(joint.loc)",
        "        for key in self._blocks_of(names)[:0]:\n            joint = self.joint(key)\n            self.prior_loc[key].copy_(joint.loc)",
        ("tests/test_guide_families.py",),
    ),
    Mutation(
        "guides: a block's sites drawn one by one (the correlations lost)",
        "pyro_cl/guides/joint_gaussian.py",
        "        key = id(site.joint)\n",
        "        key = name\n",
        ("tests/test_guide_families.py",),
    ),
    Mutation(
        "guides: the low-rank covariance without its diagonal",
        "pyro_cl/guides/low_rank.py",
        "        return self.loc + low @ self.cov_factor.T + diagonal * self.cov_diag.sqrt()",
        "        return self.loc + low @ self.cov_factor.T",
        ("tests/test_guide_families.py",),
    ),
    # deterministic parts: point values in the transaction, untouched by a refit
    Mutation(
        "state: a failed step leaves the net's own parameters as the fit left them",
        "pyro_cl/learner/state.py",
        "        if name in parameters:\n",
        "        if name in ():\n",
        ("tests/test_deterministic_parts.py",),
    ),
    Mutation(
        "learner: a memory's refit trains the values the next step starts from",
        "pyro_cl/learner/memory_step.py",
        "        with net_values_kept(learner.net):  # the propagation fit's point values stay",
        "        with torch.no_grad():",
        ("tests/test_deterministic_parts.py",),
    ),
    Mutation(
        "guides: a transition's added variance not carried to a full-covariance prior",
        "pyro_cl/guides/full_covariance.py",
        "covariance = a**2 * (tril @ tril.T) + torch.diag(v)",
        "covariance = a**2 * (tril @ tril.T) + 0 * torch.diag(v)",
        ("tests/test_guide_families.py",),
    ),
    Mutation(
        "guides: a transition's decay not applied to a low-rank factor",
        "pyro_cl/guides/low_rank.py",
        'return {"prior_factor": a * buffers["prior_factor"],',
        'return {"prior_factor": 1.0 * buffers["prior_factor"],',
        ("tests/test_guide_families.py",),
    ),
    Mutation(
        "one step ahead: a regression mixture's density without its 1/S weights",
        "pyro_cl/app/one_step_ahead.py",
        "per_row = logsumexp(log_density, axis=0) - np.log(len(means))",
        "per_row = logsumexp(log_density, axis=0)",
        ("tests/test_one_step_ahead.py",),
    ),
    Mutation(
        "one step ahead: a normal's log-density without its log-scale",
        "pyro_cl/app/one_step_ahead.py",
        "log_density = -0.5 * z**2 - np.log(scales) - 0.5 * np.log(2 * np.pi)",
        "log_density = -0.5 * z**2 - 0.5 * np.log(2 * np.pi)",
        ("tests/test_one_step_ahead.py",),
    ),
    Mutation(
        "one step ahead: a river regressor's noise from errors made after learning the row",
        "pyro_cl/app/one_step_ahead.py",
        """            self.squared_errors += (float(target) - self.model.predict_one(features)) ** 2
            self.rows += 1
            self.model.learn_one(features, float(target))""",
        """            self.model.learn_one(features, float(target))
            self.squared_errors += (float(target) - self.model.predict_one(features)) ** 2
            self.rows += 1""",
        ("tests/test_one_step_ahead.py",),
    ),
    Mutation(
        "validation domains: the held-out sources tested on their test sets",
        "pyro_cl/app/domain_benchmark.py",
        "data[domain] = (x[train], y[train], x[test], y[test])",
        "data[domain] = (x[train], y[train], *self.data[domain][2:])",
        ("tests/test_domain_graph.py",),
    ),
    # Kronecker-factored Laplace propagation (pyro_cl/baselines/kronecker_curvature.py)
    Mutation(
        "kfac: the input factor summed, not averaged (eq. 1 without 1/N)",
        "pyro_cl/baselines/kronecker_curvature.py",
        "return {name: (g * (n / used), a / used) for name, (g, a) in totals.items()}",
        "return {name: (g * (n / used), a) for name, (g, a) in totals.items()}",
        ("tests/test_kronecker_laplace.py",),
    ),
    Mutation(
        "kfac: eq. 3's split with the factors' sizes swapped",
        "pyro_cl/baselines/kronecker_curvature.py",
        "alpha = torch.sqrt(len(rows) * spread_a / (len(columns) * spread_g))",
        "alpha = torch.sqrt(len(columns) * spread_a / (len(rows) * spread_g))",
        ("tests/test_kronecker_laplace.py",),
    ),
    Mutation(
        "kfac laplace: the matrix normal prior's density added to the MAP loss, not subtracted",
        "pyro_cl/baselines/laplace.py",
        "total = total - prior.log_prob(layout.join(values))",
        "total = total + prior.log_prob(layout.join(values))",
        ("tests/test_kronecker_laplace.py",),
    ),
    Mutation(
        "context points: a fixed-size draw from the last task's kept points only",
        "pyro_cl/fitters/context_points.py",
        "return torch.randperm(len(self.points), device=self.points.x.device)[: self.total]",
        "return len(self.points) - 1 - torch.randperm(10, device=self.points.x.device)[: self.total]",
        ("tests/test_function_space.py",),
    ),
]


def run(mutation: Mutation, tree: Path) -> tuple[bool, float, str]:
    """Put ``mutation`` into ``tree``, run its tests there and take it out again.

    :returns: whether it was killed, the seconds it took and the last line pytest printed.
    """
    path = tree / mutation.path
    original = path.read_text()
    if original.count(mutation.old) != 1:
        raise ValueError(
            f"{mutation.name}: the text to mutate occurs {original.count(mutation.old)} times in {mutation.path}"
        )
    path.write_text(original.replace(mutation.old, mutation.new))
    start = time.perf_counter()
    try:
        result = subprocess.run(
            [sys.executable, "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider", *mutation.tests],
            cwd=tree,
            env={**os.environ, "PYTHONPATH": str(tree), "OMP_NUM_THREADS": "1"},
            capture_output=True,
            text=True,
        )
    finally:
        path.write_text(original)
    lines = [line for line in result.stdout.splitlines() if line.strip()]
    return result.returncode != 0, time.perf_counter() - start, lines[-1] if lines else ""


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", help="run the mutations whose name contains this text")
    parser.add_argument("--list", action="store_true", help="list the mutations and stop")
    args = parser.parse_args(argv)
    chosen = [m for m in MUTATIONS if args.only is None or args.only in m.name]
    if args.list:
        for mutation in chosen:
            print(f"{mutation.name}  [{mutation.path}]")
        return 0
    survivors = []
    with tempfile.TemporaryDirectory() as folder:
        tree = Path(folder) / "tree"
        archive = subprocess.run(
            ["git", "archive", "HEAD"], cwd=ROOT, capture_output=True, check=True
        )
        tree.mkdir()
        subprocess.run(["tar", "-x"], cwd=tree, input=archive.stdout, check=True)
        for mutation in chosen:
            killed, seconds, last = run(mutation, tree)
            print(
                f"{'killed  ' if killed else 'SURVIVED'} {seconds:5.0f} s  {mutation.name}  ({last})"
            )
            if not killed:
                survivors.append(mutation.name)
        shutil.rmtree(tree)
    print(f"\n{len(chosen) - len(survivors)} of {len(chosen)} mutations killed")
    for name in survivors:
        print(f"  survived: {name}")
    return 1 if survivors else 0


if __name__ == "__main__":
    sys.exit(main())
