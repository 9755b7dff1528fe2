"""The restaurant pack (seed 1's 成都小吃 example): a tenant's menu and orders, and the tools menu, order, checkout."""
