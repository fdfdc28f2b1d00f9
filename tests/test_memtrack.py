"""grader.course.memtrack: the bytes of tensors alive at once, measured on the CPU by watching every operation."""
import torch

from grader.course.memtrack import track_memory


def test_counts_what_is_allocated_and_freed_inside():
    with track_memory() as mem:
        a = torch.empty(1000)              # 4000 bytes
        view = a[10:]                      # a view allocates nothing
        assert mem.current == 4000
        del a
        assert mem.current == 4000         # the view keeps the storage alive
        del view
        assert mem.current == 0
        b = torch.empty(250)
    assert mem.peak == 4000 and mem.current == 1000 and mem.allocated == 5000
    del b


def test_views_of_older_tensors_and_in_place_ops_cost_nothing():
    x = torch.randn(100, 100)
    with track_memory() as mem:
        x.t()
        x.add_(1)
        x[:5].mul_(2)
    assert mem.peak == 0


def test_a_training_step_counts_gradients_and_optimizer_state():
    torch.manual_seed(0)
    model = torch.nn.Linear(256, 256)
    opt = torch.optim.Adam(model.parameters())
    params = sum(p.numel() for p in model.parameters()) * 4
    with track_memory() as mem:
        model(torch.randn(8, 256)).sum().backward()
        after_backward = mem.current
        opt.step()
    assert after_backward >= params                  # the gradients (and the input batch)
    assert mem.current - after_backward >= 2 * params  # Adam's two states, and its step counter
    assert mem.peak >= mem.current
