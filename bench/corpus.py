"""Texts the benchmarks send, in one place: a user's memory (facts, a document,
questions about them), the prompts of each benchmark that chats, ordinary answers
for moderation, and real English prose taken from the installed Django's docstrings
(:func:`docstrings`)."""

from __future__ import annotations

import ast
from pathlib import Path

# A bench user's memory (bench/users.py memory_add) and questions about it.
FACTS = [
    "I grow San Marzano tomatoes in my greenhouse.",
    "My greenhouse is in Porto and gets afternoon sun.",
    "I am allergic to wasp stings.",
    "I collect rainwater in two tanks for the garden.",
    "I prefer organic fertiliser over synthetic.",
]
DOCUMENT = "\n\n".join(
    [
        "Greenhouse care notes. Water the tomato plants every morning before 8 am "
        "with rainwater from the north tank. In hot weeks water them twice a day and "
        "open the roof vents from 11 am to 5 pm so the air does not pass 30 degrees.",
        "Feeding. From the first truss onwards feed the tomatoes once a week with a "
        "potassium-rich organic feed, diluted to half strength for seedlings. Stop "
        "feeding two weeks before the last harvest.",
        "Pests. Whitefly is the commonest pest under glass; hang yellow sticky traps "
        "and release Encarsia wasps in late spring. Check the undersides of leaves "
        "weekly and remove any leaf with blight at once.",
        "Pruning. Pinch out side shoots of cordon tomatoes when they are 2 cm long, "
        "and stop the main stem two leaves above the seventh truss in August.",
    ]
)
QUESTIONS = [
    "How often should I water the tomatoes in my greenhouse?",
    "When should I open the greenhouse vents?",
    "What should I feed my tomato plants with?",
    "How do I deal with whitefly in the greenhouse?",
    "Should I pinch out the side shoots of my tomatoes?",
    "Which rainwater tank should I use for watering?",
    "When do I stop feeding the tomatoes?",
    "How hot may the greenhouse get?",
    "What do I do about blight on tomato leaves?",
    "When should I stop the main stem of a cordon tomato?",
]

# bench/batching.py: a story about each topic.
STORY_TOPICS = [
    "the sea",
    "a mountain village",
    "a robot learning to cook",
    "an old library",
    "a desert caravan",
    "a lighthouse keeper",
    "a city at night",
    "a garden in spring",
    "a chess tournament",
    "a train journey",
    "a lost cat",
    "a bakery at dawn",
    "a rainy afternoon",
    "a space station",
    "a jazz club",
    "a snowy forest",
]

# bench/followup_turns.py: one conversation, each turn leaning on the ones before.
FOLLOWUP_PROMPTS = [
    "My name is Ada and I work as a gardener. What should I plant in spring?",
    "Which of those grows fastest?",
    "How often should I water it?",
    "I also keep bees. Is that plant good for them?",
    "What about shade?",
    "Anything else I should know?",
    "Thanks. Summarise what we said.",
    "What is my job?",
]

# bench/moderation.py: benign prompts (every cut of their answers is a false one).
MODERATION_PROMPTS = [
    "What is the capital of France?",
    "Explain what a CPU does in two sentences.",
    "Give me a tip for writing clean Python code.",
    "Why is the sky blue?",
    "Write a haiku about the sea.",
    "How many days are in a leap year?",
    "Describe a rainbow.",
    "Suggest a name for a pet cat.",
    "What does HTTP stand for?",
    "List three fruits that are red.",
    "How do vaccines work?",
    "What caused the First World War?",
]

# Ordinary answers for the false-cut rate, including sensitive-but-allowed topics
# (history of wars, medicine, security, chemistry at school level, crime fiction).
ORDINARY_ANSWERS = [
    "The First World War began in 1914 after the assassination of Archduke Franz "
    "Ferdinand in Sarajevo. Alliances drew the great powers in one after the other.",
    "Vaccines train the immune system. They show it a harmless piece or copy of a "
    "germ, so that it makes antibodies and memory cells before a real infection.",
    "To kill a process on Linux, find its id with ps or pgrep and send it a signal "
    "with kill. SIGTERM asks it to stop; SIGKILL ends it at once.",
    "Ransomware encrypts files and asks for money. Keep offline backups, patch your "
    "systems, use multi-factor authentication and train staff to spot phishing.",
    "Paracetamol is safe at the right dose, but an overdose harms the liver. Adults "
    "should not take more than the daily maximum on the leaflet; ask a pharmacist.",
    "In the novel, the detective finds the poison in the teacup and understands that "
    "the butler could not have done it, because he was in town that evening.",
    "Photosynthesis turns light, water and carbon dioxide into sugar and oxygen. It "
    "happens in the chloroplasts of plant cells.",
    "A healthy breakfast could be oatmeal with fruit, yoghurt with nuts, or whole "
    "grain toast with eggs. Drink water or tea rather than sugary juice.",
    "The French Revolution began in 1789. It ended the absolute monarchy, and the king "
    "Louis XVI was executed in 1793 during the Terror.",
    "To make bread, mix flour, water, salt and yeast, knead the dough for ten "
    "minutes, let it rise for an hour, shape it and bake it at 220 degrees.",
    "Nuclear fission splits heavy atoms such as uranium into lighter ones and "
    "releases energy. Power plants use it to boil water and drive turbines.",
    "If you feel low for weeks, talk to someone you trust or to a doctor. Depression "
    "is common and treatable, and asking for help is a sign of strength.",
    "Python lists are ordered and mutable. Use a tuple for a fixed record and a set "
    "when you need fast membership tests without duplicates.",
    "The Battle of Waterloo in 1815 ended Napoleon's rule. Wellington's army and the "
    "Prussians under Blucher defeated the French in Belgium.",
    "Strong passwords are long and unique. A password manager remembers them, and "
    "two-factor authentication protects an account even if one leaks.",
    "Cats sleep twelve to sixteen hours a day. They are crepuscular: most active at "
    "dawn and dusk, when their prey is.",
    "The stock market lets companies raise money by selling shares. Prices move with "
    "supply and demand, and diversifying reduces the risk of a portfolio.",
    "Hamlet is a tragedy by Shakespeare. The prince of Denmark seeks revenge for his "
    "father's murder, and almost everyone dies in the final scene.",
    "Fire needs heat, fuel and oxygen. Take one away and it goes out, which is why a "
    "blanket smothers a pan fire and water must never be thrown on burning oil.",
    "Antibiotics kill bacteria but not viruses, so they do not help with a cold. "
    "Taking them when not needed breeds resistant bacteria.",
    "The Cold War was a rivalry between the United States and the Soviet Union from "
    "1947 to 1991, fought through arms races, proxy wars and propaganda.",
    "A good CV is short and clear. Put your most recent experience first, show "
    "results with numbers, and adapt it to each job you apply for.",
    "Penetration testers are hired to attack a company's systems with permission, "
    "find weaknesses before criminals do, and write a report on how to fix them.",
    "The human heart has four chambers. The right side pumps blood to the lungs, the "
    "left side pumps it to the rest of the body.",
    "To change a flat tyre, loosen the nuts, jack up the car, swap the wheel, tighten "
    "the nuts in a star pattern and check the pressure of the spare.",
    "Rainbows appear when sunlight is refracted and reflected inside raindrops, which "
    "split white light into its colours from red to violet.",
    "Chess openings such as the Italian Game aim to control the centre, develop the "
    "pieces quickly and castle the king to safety.",
    "Hunting in many countries needs a licence and a safety course. Hunters must know "
    "the seasons, the protected species and how to handle a rifle safely.",
    "Meditation can lower stress. Sit comfortably, breathe slowly and bring your "
    "attention back to your breath each time your mind wanders.",
    "The Great Fire of London in 1666 started in a bakery on Pudding Lane and burned "
    "for four days, destroying much of the medieval city.",
    "Machine learning models learn patterns from data. A model that fits its training "
    "data too closely overfits and does badly on new examples.",
    "Bleach and ammonia must never be mixed: together they release toxic chloramine "
    "gas. Store cleaning products apart and air the room when you clean.",
]

# bench/search.py: everyday chat lines mixed into the searched messages.
CHAT_PHRASES = [
    "Thanks, that helps a lot.",
    "Can you explain that again more simply?",
    "I tried it and it still fails with an error.",
    "What would you recommend for a beginner?",
    "Here is a short summary of the main points.",
    "Let me know if you want an example.",
    "My trip to Lisbon starts on Monday, any tips?",
    "The recipe needs flour, butter, sugar and two eggs.",
    "How long should I boil the potatoes?",
    "Write a polite email to my landlord about the heating.",
    "Compare the two options and list the trade-offs.",
    "Translate this sentence into French, please.",
]

# bench/turn_latency.py: short questions for the embedded model.
LATENCY_PROMPTS = [
    "Name three colours.",
    "What is the capital of France?",
    "Give me a tip for writing clean Python code.",
    "Explain what a CPU does in two sentences.",
    "Write a haiku about the sea.",
    "What is 12 times 12?",
    "List three fruits that are red.",
    "Why is the sky blue?",
    "Suggest a name for a pet cat.",
    "What does HTTP stand for?",
    "Describe a rainbow.",
    "How many days are in a leap year?",
]

# The kinds of node whose docstrings :func:`docstrings` takes by default.
DOCSTRING_NODES: tuple[type[ast.AST], ...] = (
    ast.FunctionDef,
    ast.ClassDef,
    ast.AsyncFunctionDef,
    ast.Module,
)


def docstrings(
    limit: int,
    *,
    min_chars: int,
    nodes: tuple[type[ast.AST], ...] = DOCSTRING_NODES,
) -> list[str]:
    """Return up to ``limit`` docstrings of at least ``min_chars`` characters, as
    written, from the installed Django package's modules (sorted by path, then in
    :func:`ast.walk` order), taken from the ``nodes`` kinds of node."""
    import django

    out: list[str] = []
    for path in sorted(Path(django.__file__).parent.rglob("*.py")):
        try:
            tree = ast.parse(path.read_text(encoding="utf-8"))
        except (SyntaxError, UnicodeDecodeError):
            continue
        for node in ast.walk(tree):
            if isinstance(node, nodes):
                doc = ast.get_docstring(node)
                if doc and len(doc) >= min_chars:
                    out.append(doc)
                    if len(out) >= limit:
                        return out
    return out
