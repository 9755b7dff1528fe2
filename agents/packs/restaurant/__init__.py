"""The restaurant pack (seed 1's 成都小吃 example): a tenant's menu and orders, the tools menu, order, checkout, and
seed 1's two example workflows (菜单推荐工作流, 客户营销工作流) with the functions and plugins they call."""

# The pack's key (tenants.packs): also the label of its Django app, whose models belong to the pack.
PACK = "restaurant"
