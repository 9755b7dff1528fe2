"""The energy pack (issue 7): PV economics, sensitivity and report tools, the PV economics workflow and the energy
tenant's demo agents and planner."""

# The pack's key (tenants.packs): also the label of its Django app.
PACK = "energy"
