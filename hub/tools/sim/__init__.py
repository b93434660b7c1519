"""A discrete-event simulation of many hubs driving the real overlay core (``hub/core/overlay``)."""
