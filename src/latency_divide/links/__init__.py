"""The links stage: a household's link configuration as data (plan: rates, queue sizes,
delay and the tc / delay-line commands that apply them).
"""
